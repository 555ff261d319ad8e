import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser } from 'playwright-core'
import { startTestServer } from '../helpers/app'
import { launchBrowser, openSession } from '../helpers/browser'
import { makeUser } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'

// docs/api.md §11 with no internet: /docs works from the binary; and a server that went away is said
// in words, by the control, with what the person typed kept and no spinner left behind.

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)
describeWith(chromium, 'the dashboard offline, in a browser', () => {
  let browser: Browser
  beforeAll(async () => {
    browser = await launchBrowser()
  })
  afterAll(() => browser?.close())

  test('/docs renders the API reference with no request to another host', async () => {
    const server = await startTestServer()
    try {
      const s = await openSession(browser, server.url)
      await s.page.goto(`${server.url}/docs`)
      await s.page.getByText('Readiness: the database answers').first().waitFor()
      await s.page.getByText('Powered by Scalar').waitFor()
      await s.screenshot('docs')
      await s.finish()
    } finally {
      await server.stop()
    }
  })

  test('a server that went away: the message shows where the person acted, and what they typed stays', async () => {
    const server = await startTestServer()
    const s = await openSession(browser, server.url)
    const { page } = s
    s.allowOffline()
    const user = await makeUser(server)
    await page.goto(server.url)
    await page.getByLabel('Email').fill(user.email)
    await page.getByLabel('Password').fill(user.password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('heading', { name: 'Batches' }).waitFor()
    await server.stop()

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Files' }).click()
    await page
      .getByText('The server cannot be reached. Check that it is running, then try again.')
      .first()
      .waitFor()
    expect(await page.getByText('Loading…').count()).toBe(0)

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Keys' }).click()
    await page.getByLabel('Name').fill('laptop')
    await page.getByRole('button', { name: 'Create key' }).click()
    await page
      .getByRole('form', { name: 'Create key' })
      .locator('..')
      .getByText('The server cannot be reached. Check that it is running, then try again.')
      .first()
      .waitFor()
    expect(await page.getByLabel('Name').inputValue()).toBe('laptop')
    expect(await page.getByRole('button', { name: 'Create key' }).isEnabled()).toBe(true)

    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByLabel('Email').fill(user.email)
    await page.getByLabel('Password').fill(user.password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page
      .getByRole('form', { name: 'Sign in' })
      .getByText('The server cannot be reached. Check that it is running, then try again.')
      .waitFor()
    expect(await page.getByLabel('Email').inputValue()).toBe(user.email)
    await s.finish()
  })
})
