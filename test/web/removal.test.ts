import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser, Page } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, signIn } from '../helpers/browser'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import { registerWorker } from '../helpers/workers'

// docs/api.md §11 and §3: an organization's owners and admins remove a worker from its row ("Remove",
// then "Confirm removal"), and its owner deletes a team organization ("Delete organization", then
// "Confirm deletion"), the refusal of an org that still has workers shown beside the control.

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)

const workers = (page: Page, org: string) => page.getByRole('table', { name: `Workers of ${org}` })

describeWith(chromium, 'removing workers and deleting an organization, in a browser', () => {
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

  test('an owner removes a worker, is told the org still has one, removes it on the Workers page and deletes the org; a viewer sees neither control', async () => {
    const owner = await makeUser(server, { full_name: 'Olga Owner' })
    const viewer = await makeUser(server)
    const org = (await server.req('POST', '/v1/orgs', { token: owner.token, body: { name: 'Removal Lab' } }))
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
    await registerWorker(server, key.key, { name: 'gpu-old', machine_id: 'm-old' })
    await registerWorker(server, key.key, { name: 'gpu-stays', machine_id: 'm-stays' })

    const s = await openSession(browser, server.url)
    const { page } = s
    await page.goto(server.url)
    await signIn(page, viewer.email, viewer.password)
    await page.goto(`${server.url}/app/orgs/${org}`)
    await workers(page, 'Removal Lab')
      .getByRole('row', { name: /gpu-old/ })
      .waitFor()
    expect(await page.getByRole('button', { name: 'Remove worker gpu-old' }).count()).toBe(0)
    expect(await page.getByRole('button', { name: 'Delete organization Removal Lab' }).count()).toBe(0)
    await page.getByRole('button', { name: 'Sign out' }).click()

    await signIn(page, owner.email, owner.password)
    // A Personal Org has no delete control.
    await page.goto(`${server.url}/app/orgs/${owner.personalOrgId}`)
    await page.getByRole('heading', { name: 'Members' }).waitFor()
    expect(await page.getByRole('button', { name: /^Delete organization/ }).count()).toBe(0)

    await page.goto(`${server.url}/app/orgs/${org}`)
    const table = workers(page, 'Removal Lab')
    await table.getByRole('row', { name: /gpu-old/ }).waitFor()
    // Asked first; "Cancel" leaves the worker.
    await page.getByRole('button', { name: 'Remove worker gpu-old' }).click()
    const ask = page.getByRole('group', { name: 'Remove worker gpu-old' })
    await ask.getByRole('button', { name: 'Cancel' }).click()
    await ask.waitFor({ state: 'detached' })
    await page.getByRole('button', { name: 'Remove worker gpu-old' }).click()
    await ask.getByRole('button', { name: 'Confirm removal' }).click()
    await table.getByRole('row', { name: /gpu-old/ }).waitFor({ state: 'detached' })
    await table.getByRole('row', { name: /gpu-stays/ }).waitFor()

    // The org still has a worker: the refusal is shown beside the control.
    s.allowStatus(409)
    await page.getByRole('button', { name: 'Delete organization Removal Lab' }).click()
    await page
      .getByRole('group', { name: 'Delete organization Removal Lab' })
      .getByRole('button', { name: 'Confirm deletion' })
      .click()
    const deleteSection = page.getByRole('region', { name: 'Delete organization' })
    await deleteSection.getByRole('alert').filter({ hasText: 'still has 1 worker' }).waitFor()

    // The Workers page has the same control for each org the owner manages.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Workers' }).click()
    await page.getByRole('button', { name: 'Remove worker gpu-stays' }).click()
    await page
      .getByRole('group', { name: 'Remove worker gpu-stays' })
      .getByRole('button', { name: 'Confirm removal' })
      .click()
    await page.getByRole('button', { name: 'Remove worker gpu-stays' }).waitFor({ state: 'detached' })

    await page.goto(`${server.url}/app/orgs/${org}`)
    await page.getByRole('button', { name: 'Delete organization Removal Lab' }).click()
    await page
      .getByRole('group', { name: 'Delete organization Removal Lab' })
      .getByRole('button', { name: 'Confirm deletion' })
      .click()
    await page.waitForURL(`${server.url}/app/orgs`)
    await page.getByRole('link', { name: "Olga Owner's Personal Org" }).waitFor()
    expect(await page.getByRole('link', { name: 'Removal Lab' }).count()).toBe(0)
    expect(
      (await server.req('GET', '/v1/orgs', { token: owner.token })).body.data.map((o: any) => o.id),
    ).toEqual([owner.personalOrgId])
    await s.finish()
  })
})
