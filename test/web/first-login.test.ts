import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession } from '../helpers/browser'
import { chromium, describeWith } from '../helpers/requires'

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)
describeWith(chromium, 'first login in a browser', () => {
  let server: TestServer
  let browser: Browser
  beforeAll(async () => {
    ;[server, browser] = await Promise.all([startTestServer(), launchBrowser()])
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  test('the first admin signs in, must change the password before anything else, then sees Admin', async () => {
    const s = await openSession(browser, server.url)
    const { page } = s
    s.allowStatus(400)
    await page.goto(server.url)
    await page.getByRole('region', { name: 'Pool capacity' }).getByText('Workers online').waitFor()
    await s.screenshot('sign-in')
    await page.getByLabel('Email').fill('admin@localhost')
    await page.getByLabel('Password').fill('admin-password-1')
    await page.getByRole('button', { name: 'Sign in' }).click()

    await page.getByLabel('Current password').waitFor()
    // docs/api.md §1: nothing else is reachable until the password is changed.
    expect(await page.getByRole('link', { name: 'Batches' }).count()).toBe(0)
    await page.getByLabel('Current password').fill('not-the-password')
    await page.getByLabel('New password').fill('a-better-password')
    await page.getByRole('button', { name: 'Change password' }).click()
    await page.getByText('The current password is not correct').waitFor()
    // What the person typed stays.
    expect(await page.getByLabel('New password').inputValue()).toBe('a-better-password')

    await page.getByLabel('Current password').fill('admin-password-1')
    await page.getByRole('button', { name: 'Change password' }).click()
    await page.getByRole('link', { name: 'Admin' }).waitFor()
    for (const name of ['Batches', 'Files', 'Models', 'Workers', 'Keys', 'Organizations', 'Usage'])
      expect(await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name }).count()).toBe(1)
    const token = await page.evaluate(() => sessionStorage.getItem('gridkeep.token'))
    expect(token).toMatch(/^eyJ/)
    // The new token works: the old one was replaced in the session.
    expect((await server.req('GET', '/v1/auth/me', { token: token! })).body.must_change_password).toBe(false)
    await s.finish()
  })
})
