import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, signIn } from '../helpers/browser'
import { makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import { eventually, until } from '../helpers/until'

// docs/api.md §11 Audit and §17: the audit log in the dashboard, for everyone who may read an entry
// (superadmins; the owners and admins of any organization, a Personal Org included), with the API's
// filters and its JSON lines export.

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)

const nav = (page: Page) => page.getByRole('navigation', { name: 'Main' })
const row = (page: Page, text: string | RegExp) =>
  page.getByRole('table', { name: 'Audit events' }).getByRole('row').filter({ hasText: text })

describeWith(chromium, 'the Audit page, in a browser', () => {
  let server: TestServer
  let browser: Browser

  beforeAll(async () => {
    ;[server, browser] = await Promise.all([
      startTestServer({ RATE_LIMIT_LOGIN_PER_MINUTE: '0', RATE_LIMIT_KEYS_PER_MINUTE: '0' }),
      launchBrowser(),
    ])
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  test("an org owner reads the org's entries, filters them, and sees a bad filter's error beside it; a viewer reads only their own Personal Org's", async () => {
    const owner = await makeUser(server, { full_name: 'Olga Owner' })
    const viewer = await makeUser(server)
    const org = (await server.req('POST', '/v1/orgs', { token: owner.token, body: { name: 'Audit Lab' } }))
      .body.id as string
    expect(
      (
        await server.req('POST', `/v1/orgs/${org}/members`, {
          token: owner.token,
          body: { email: viewer.email, role: 'viewer' },
        })
      ).status,
    ).toBe(201)
    const key = await makeWorkerKey(server, owner, org)
    expect(
      (await server.req('DELETE', `/v1/orgs/${org}/api-keys/${key.id}`, { token: owner.token })).status,
    ).toBe(200)
    // The viewer's own worker key, in their Personal Org.
    const own = await makeWorkerKey(server, viewer, viewer.personalOrgId)

    const s = await openSession(browser, server.url)
    const { page } = s
    await page.goto(server.url)
    // A viewer of the team owns their Personal Org: its entries are theirs, the team's are not.
    await signIn(page, viewer.email, viewer.password)
    await nav(page).getByRole('link', { name: 'Audit' }).click()
    await page.getByText('in the organizations you own or administer (your Personal Org included)').waitFor()
    await row(page, own.id).filter({ hasText: 'key.worker.created' }).waitFor()
    expect(await page.getByRole('table', { name: 'Audit events' }).locator('tbody tr').count()).toBe(1)
    expect(await page.getByLabel('Organization').locator('option').allTextContents()).toEqual([
      'Any of mine',
      "Test User's Personal Org",
    ])
    await page.getByRole('button', { name: 'Sign out' }).click()

    await signIn(page, owner.email, owner.password)
    await nav(page).getByRole('link', { name: 'Audit' }).click()
    await page.getByRole('heading', { name: 'Audit' }).waitFor()
    await row(page, 'org.created').waitFor()
    await row(page, 'key.worker.created').waitFor()
    await row(page, 'org.member.added').waitFor()
    // Sign-ins belong to no organization: an owner does not read them.
    expect(await row(page, 'auth.signed_in').count()).toBe(0)
    await s.screenshot('audit')

    await page.getByLabel('Action').selectOption('key.worker.*')
    await page.getByRole('button', { name: 'Apply filters' }).click()
    // The table leaves while the filtered page loads (the old rows gone before the new ones come):
    // the filtered rows are waited for, not the old ones' leaving.
    await eventually(async () =>
      expect(
        (
          await page
            .getByRole('table', { name: 'Audit events' })
            .locator('tbody tr td:nth-child(2)')
            .allTextContents()
        ).sort(),
      ).toEqual(['key.worker.created', 'key.worker.revoked']),
    )

    s.allowStatus(400)
    await page.getByLabel('Actor').fill('bob')
    await page.getByRole('button', { name: 'Apply filters' }).click()
    await page.getByRole('alert').filter({ hasText: "Invalid query parameter 'actor'" }).waitFor()
    expect(await page.getByLabel('Actor').getAttribute('aria-invalid')).toBe('true')
    await s.finish()
  })

  test('a superadmin reads every entry, filters by actor, and downloads the JSON lines export', async () => {
    const admin = await makeSuperadmin(server)
    const someone = await makeUser(server)
    const s = await openSession(browser, server.url)
    const { page } = s
    await page.goto(server.url)
    await signIn(page, admin.email, admin.password)
    await nav(page).getByRole('link', { name: 'Audit' }).click()
    await row(page, 'auth.signed_in').first().waitFor()

    await page.getByLabel('Actor').fill(someone.id)
    await page.getByRole('button', { name: 'Apply filters' }).click()
    await row(page, `user ${someone.id}`).filter({ hasText: 'auth.signed_in' }).waitFor()
    await until(
      'only the filtered entry listed',
      async () => (await page.getByRole('table', { name: 'Audit events' }).locator('tbody tr').count()) === 1,
    )

    const [file] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('button', { name: 'Download JSONL' }).click(),
    ])
    expect(file.suggestedFilename()).toBe('audit.jsonl')
    const lines = readFileSync((await file.path())!, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(lines.map((e) => [e.action, e.actor.user_id])).toEqual([['auth.signed_in', someone.id]])
    await s.finish()
  })
})
