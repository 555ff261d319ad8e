import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser } from 'playwright-core'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { createUser } from '../../src/modules/users/service'
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

  test('a terminal\'s sign-in: the browser asks "A terminal is asking to sign in as …" and sends the code to the loopback only after Continue', async () => {
    // The terminal's loopback listener (as `gridkeep login --sso` runs one), recording what reaches it.
    const arrived: URL[] = []
    const listener = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      fetch(req) {
        arrived.push(new URL(req.url))
        return new Response('<!doctype html><p>Signed in.</p>', { headers: { 'content-type': 'text/html' } })
      },
    })
    const loopback = `http://127.0.0.1:${listener.port}`
    const verifier = `v-${crypto.randomUUID()}-${crypto.randomUUID()}`
    const start = new URL(`${server.url}/v1/auth/oidc/start`)
    start.search = new URLSearchParams({
      redirect_uri: `${loopback}/callback`,
      code_challenge: new Bun.CryptoHasher('sha256').update(verifier).digest('base64url'),
      code_challenge_method: 'S256',
      state: 'terminal-state',
    }).toString()
    const s = await openSession(browser, server.url, { alsoAllow: [provider.issuer, loopback] })
    try {
      await s.page.goto(start.href)
      await s.page.waitForURL(`${provider.issuer}/**`)
      await s.page.getByPlaceholder('Enter any login').fill('alice')
      await s.page.getByPlaceholder('and password').fill('any-password')
      await s.page.getByRole('button', { name: 'Sign-in' }).click()
      await s.page.getByRole('button', { name: 'Continue' }).click()

      await s.page
        .getByRole('heading', { name: `A terminal is asking to sign in as ${PEOPLE.alice.email}` })
        .waitFor()
      // Back from the provider, the browser is on gridkeep's question: nothing went to the loopback.
      expect(new URL(s.page.url()).origin).toBe(server.url)
      expect(arrived).toEqual([])
      await s.page.getByRole('button', { name: 'Continue' }).click()
      await s.page.getByText('Signed in.').waitFor()
      expect(arrived).toHaveLength(1)
      expect(arrived[0]!.searchParams.get('state')).toBe('terminal-state')
      const session = await server.req('POST', '/v1/auth/oidc/token', {
        body: { code: arrived[0]!.searchParams.get('code'), code_verifier: verifier },
      })
      expect(session.status).toBe(200)
      expect(session.body.user.email).toBe(PEOPLE.alice.email)
      await s.finish()
    } finally {
      await listener.stop(true)
    }
  })

  test('passwords off: an account with a first password to change signs in by SSO to the dashboard; the Admin page adds users without a password', async () => {
    const port = freePort()
    const url = `http://127.0.0.1:${port}`
    await provider.configure({
      redirect_uris: [`${server.url}/v1/auth/oidc/callback`, `${url}/v1/auth/oidc/callback`],
    })
    const ssoOnly = await startTestServer(
      ssoEnv(provider, {
        PORT: String(port),
        PUBLIC_URL: url,
        PASSWORD_LOGIN: 'false',
        OIDC_ADMIN_GROUPS: 'gridkeep-admins',
      }),
    )
    try {
      // Made while passwords were on: a first password never changed.
      await createUser(
        ssoOnly.deps,
        {
          email: PEOPLE.ada.email,
          full_name: 'Ada Admin',
          password: 'temporary-pass-1',
          must_change_password: true,
        },
        SYSTEM_AUDIT,
      )
      const s = await openSession(browser, ssoOnly.url, { alsoAllow: [provider.issuer] })
      await s.page.goto(ssoOnly.url)
      await s.page.getByRole('button', { name: 'Sign in with Lab SSO', exact: true }).click()
      await s.page.waitForURL(`${provider.issuer}/**`)
      await s.page.getByPlaceholder('Enter any login').fill('ada')
      await s.page.getByPlaceholder('and password').fill('any-password')
      await s.page.getByRole('button', { name: 'Sign-in' }).click()
      await s.page.getByRole('button', { name: 'Continue' }).click()

      // The dashboard itself, not the forced password change.
      await s.page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Admin' }).click()
      const form = s.page.getByRole('form', { name: 'Add user' })
      await form.getByLabel('Full name').fill('Grace Hopper')
      expect(await form.getByLabel('First password').count()).toBe(0)
      await form.getByLabel('Email').fill('grace@lab.example')
      await form.getByRole('button', { name: 'Add user' }).click()
      await s.page.getByText('grace@lab.example added: they sign in with Lab SSO.').waitFor()
      const grace = await ssoOnly.deps.store.accounts.findUserByEmail('grace@lab.example')
      expect(grace).toMatchObject({ password_hash: '', must_change_password: false })
      await s.finish()
    } finally {
      await ssoOnly.stop()
    }
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
    // A malformed return (here: no state) is a page in words too, never a server error.
    await s.page.goto(`${server.url}/v1/auth/oidc/callback?error=access_denied`)
    await s.page
      .getByText("The identity provider's answer is malformed: it carries no state; start the sign-in again")
      .waitFor()
    await s.page.getByText('400 invalid_callback').waitFor()
    await s.page.getByRole('link', { name: 'Back to sign-in' }).click()
    await s.page.getByRole('button', { name: 'Sign in with Lab SSO', exact: true }).waitFor()
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
