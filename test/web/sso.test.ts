import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession } from '../helpers/browser'
import { freePort, PEOPLE, ssoEnv, startOidcProvider, type TestProvider } from '../helpers/oidc-provider'
import { chromium, describeWith } from '../helpers/requires'

// docs/api.md §2 "Single sign-on" and §11: the dashboard's "Sign in with <provider>" in a real
// browser, through the real provider's login and consent pages, back to a signed-in dashboard.

setDefaultTimeout(90_000)
describeWith(chromium, 'single sign-on in a browser', () => {
  let provider: TestProvider
  let server: TestServer
  let browser: Browser
  beforeAll(async () => {
    provider = await startOidcProvider()
    const port = freePort()
    const url = `http://127.0.0.1:${port}`
    await provider.configure({ redirect_uris: [`${url}/v1/auth/oidc/callback`] })
    ;[server, browser] = await Promise.all([
      startTestServer(ssoEnv(provider, { PORT: String(port), PUBLIC_URL: url })),
      launchBrowser(),
    ])
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
    provider?.stop()
  })

  test('"Sign in with Lab SSO": the provider\'s pages, then the dashboard signed in; the Keys page makes a key', async () => {
    const s = await openSession(browser, server.url, { alsoAllow: [provider.issuer] })
    const { page } = s
    await page.goto(`${server.url}/app/keys`)
    await page.getByRole('button', { name: 'Sign in with Lab SSO', exact: true }).click()

    // The provider's own pages (oidc-provider's development interactions): login, then consent.
    await page.waitForURL(`${provider.issuer}/**`)
    await page.getByPlaceholder('Enter any login').fill('alice')
    await page.getByPlaceholder('and password').fill('any-password')
    await page.getByRole('button', { name: 'Sign-in' }).click()
    await page.getByRole('button', { name: 'Continue' }).click()

    await page.getByRole('button', { name: 'Sign out' }).waitFor()
    expect(new URL(page.url()).pathname).toBe('/app/batches')
    // The one-time code left the address bar; the session is the login JWT, as after a password.
    expect(page.url()).not.toContain('code=')
    await page.getByText(PEOPLE.alice.email).waitFor()
    const token = await page.evaluate(() => sessionStorage.getItem('gridkeep.token'))
    expect((await server.req('GET', '/v1/auth/me', { token: token! })).body.email).toBe(PEOPLE.alice.email)

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Keys' }).click()
    await page.getByLabel('Name').fill('sso-laptop')
    await page.getByRole('button', { name: 'Create key' }).click()
    await page.getByText(/^gk-[0-9A-Za-z]{40}$/).waitFor()
    await s.finish()
  })

  test('a stale return from the provider says why, with a way back; passwords off leaves only the button', async () => {
    const s = await openSession(browser, server.url, { alsoAllow: [provider.issuer] })
    s.allowStatus(400)
    await s.page.goto(`${server.url}/app/sso#code=not-a-code&return_to=%2Fapp%2Fkeys`)
    await s.page.getByText('This sign-in code is unknown, was used already or has expired').waitFor()
    expect(s.page.url()).not.toContain('not-a-code')
    await s.page.getByRole('link', { name: 'Back to sign-in' }).click()
    await s.page.getByRole('button', { name: 'Sign in with Lab SSO', exact: true }).waitFor()
    expect(await s.page.getByLabel('Password').count()).toBe(1)
    await s.finish()

    const ssoOnly = await startTestServer(
      ssoEnv(provider, { PASSWORD_LOGIN: 'false', OIDC_ADMIN_GROUPS: 'gridkeep-admins' }),
    )
    try {
      const only = await openSession(browser, ssoOnly.url)
      await only.page.goto(ssoOnly.url)
      await only.page.getByRole('button', { name: 'Sign in with Lab SSO', exact: true }).waitFor()
      expect(await only.page.getByLabel('Password').count()).toBe(0)
      expect(await only.page.getByRole('link', { name: 'Create account' }).count()).toBe(0)
      await only.finish()
    } finally {
      await ssoOnly.stop()
    }
  })
})
