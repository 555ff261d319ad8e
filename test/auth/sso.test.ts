import { afterAll, beforeAll, describe, expect, setSystemTime, test } from 'bun:test'
import { count } from 'drizzle-orm'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { log } from '../../src/lib/logger'
import { CLOCK_TOLERANCE_SECONDS } from '../../src/modules/auth/oidc'
import { createUser } from '../../src/modules/users/service'
import { makeTestApp, startTestServer, type TestApp } from '../helpers/app'
import { makeSuperadmin, makeUser } from '../helpers/builders'
import { type FakeOidc, startFakeOidc, type TokenFault } from '../helpers/fake-oidc'
import {
  ADMIN_GROUP,
  APP_PUBLIC_URL,
  answerTerminal,
  CLIENT_ID,
  CookieJar,
  dance,
  exchange,
  ID_TOKEN_TTL_SECONDS,
  PEOPLE,
  signInAtProvider,
  ssoEnv,
  startOidcProvider,
  type TestProvider,
} from '../helpers/oidc-provider'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines, rememberSecret } from '../helpers/secrets'

// docs/api.md §2 "Single sign-on": the authorization code flow against a real OpenID provider
// (oidc-provider in its own process, its login and consent pages walked over HTTP), and every way
// it can go wrong answered with a clear 4xx (or a 502 for a provider that is away) and no account.

let provider: TestProvider
beforeAll(async () => {
  provider = await startOidcProvider()
})
afterAll(() => provider.stop())

let people = 0
/** A new person at the provider (tests that change a person's claims use their own). */
async function person(claims: Partial<(typeof PEOPLE)['alice']> & { email: string }) {
  const id = `person-${++people}-${crypto.randomUUID().slice(0, 8)}`
  await provider.configure({
    accounts: { [id]: { email_verified: true, name: `Person ${people}`, groups: [], ...claims } },
  })
  return id
}
const uniqueLabEmail = () => `p-${crypto.randomUUID().slice(0, 12)}@lab.example`

async function json(res: Response) {
  return { status: res.status, body: (await res.json()) as any }
}

/** The envelope of a refusal at the callback. */
async function refused(res: Response, status: number, code: string) {
  expect(res.status).toBe(status)
  expect(((await res.json()) as any).error.code).toBe(code)
}

describe('sign-in with OpenID Connect', () => {
  let t: TestApp
  const send = (r: Request) => t.app.handle(r)
  beforeAll(() => {
    t = makeTestApp(ssoEnv(provider, { OIDC_ADMIN_GROUPS: ADMIN_GROUP, OIDC_ALLOWED_DOMAINS: 'lab.example' }))
  })
  afterAll(() => t.close())

  async function signIn(login: string, query = '') {
    const d = await dance(send, APP_PUBLIC_URL, login, query)
    expect(d.back.status).toBe(302)
    const answer = await json(await exchange(send, APP_PUBLIC_URL, d))
    expect(answer.status).toBe(200)
    return { ...answer.body, location: d.back.headers.get('location') as string }
  }

  test('GET /v1/auth/methods names the provider for the sign-in button', async () => {
    const methods = await t.req('GET', '/v1/auth/methods')
    expect(methods.status).toBe(200)
    expect(methods.body).toEqual({
      object: 'auth.methods',
      password: true,
      signup: true,
      sso: { name: 'Lab SSO', start_url: '/v1/auth/oidc/start' },
    })
  })

  test('start sends the browser to the provider with PKCE, state and nonce, and ties the sign-in to the browser', async () => {
    const start = await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
    expect(start.status).toBe(302)
    const to = new URL(start.headers.get('location')!)
    expect(to.origin).toBe(provider.issuer)
    expect(to.searchParams.get('client_id')).toBe(CLIENT_ID)
    expect(to.searchParams.get('redirect_uri')).toBe(`${APP_PUBLIC_URL}/v1/auth/oidc/callback`)
    expect(to.searchParams.get('code_challenge_method')).toBe('S256')
    expect(to.searchParams.get('code_challenge')).toMatch(/^[\w-]{43}$/)
    expect(to.searchParams.get('nonce')).toBeTruthy()
    expect(to.searchParams.get('scope')).toBe('openid email profile groups')
    const state = to.searchParams.get('state')!
    const cookie = start.headers.get('set-cookie')!
    // The browser's cookie is a random value of its own, never the state (which URLs and proxy
    // logs carry), and it appears in no URL.
    const browser = /^gk_sso=([\w-]{43});/.exec(cookie)?.[1]
    expect(browser).toBeDefined()
    expect(browser).not.toBe(state)
    expect(start.headers.get('location')).not.toContain(browser!)
    expect(cookie).toContain('HttpOnly')
    expect(cookie).toContain('SameSite=Lax')
    expect(cookie).toContain('Path=/v1/auth/oidc')
  })

  test('the first sign-in creates the account and its Personal Org; the session is the login JWT', async () => {
    const email = uniqueLabEmail()
    const login = await person({ email, name: 'Grace Hopper' })
    expect(await t.deps.store.accounts.findUserByEmail(email)).toBeUndefined()
    const first = await signIn(login, '?return_to=%2Fapp%2Fkeys')
    expect(first.location).toStartWith('/app/sso#code=')
    expect(new URLSearchParams(first.location.split('#')[1]).get('return_to')).toBe('/app/keys')
    expect(first).toMatchObject({
      token_type: 'bearer',
      platform_role: 'user',
      must_change_password: false,
      user: { email, full_name: 'Grace Hopper', platform_role: 'user', is_active: true },
    })
    const me = await t.req('GET', '/v1/auth/me', { token: first.access_token })
    expect(me.status).toBe(200)
    expect(me.body.memberships).toEqual([
      expect.objectContaining({ org_name: "Grace Hopper's Personal Org", role: 'owner', personal: true }),
    ])
    // An SSO user makes personal keys with the session, as anyone does (the Keys page, the terminal).
    const key = await t.req('POST', '/v1/users/me/api-keys', {
      token: first.access_token,
      body: { name: 'laptop' },
    })
    expect(key.status).toBe(201)
    expect((await t.req('GET', '/v1/batches', { token: key.body.key })).status).toBe(200)

    // Again: the same account, no second org.
    const second = await signIn(login)
    expect(second.user.id).toBe(first.user.id)
    expect(second.location).toBe(
      `/app/sso#${new URLSearchParams({ code: new URLSearchParams(second.location.split('#')[1]).get('code')!, return_to: '/app/batches' })}`,
    )
    expect(await t.deps.store.orgs.listMembershipsOf(first.user.id)).toHaveLength(1)
    // No password was set: the password login refuses, as for a wrong password.
    const empty = await t.req('POST', '/v1/auth/login', { body: { email, password: '' } })
    expect(empty.status).toBe(401)
    const guessed = await t.req('POST', '/v1/auth/login', {
      body: { email, password: 'any-password-at-all' },
    })
    expect(guessed.status).toBe(401)
    expect(guessed.body.error.code).toBe('invalid_credentials')
  })

  test('an email changed at the provider still signs into the same account (issuer + subject)', async () => {
    const email = uniqueLabEmail()
    const login = await person({ email })
    const before = await signIn(login)
    await provider.configure({ accounts: { [login]: { email: uniqueLabEmail() } } })
    const after = await signIn(login)
    expect(after.user.id).toBe(before.user.id)
    expect(after.user.email).toBe(email)
  })

  test('an existing account is linked only when the provider says email_verified', async () => {
    const email = uniqueLabEmail()
    const existing = await makeUser(t, { email })
    const login = await person({ email, email_verified: false })
    const unverified = await dance(send, APP_PUBLIC_URL, login)
    await refused(unverified.back, 403, 'email_not_verified')
    expect(await t.deps.store.sso.findLinkedUser(provider.issuer, login)).toBeUndefined()

    await provider.configure({ accounts: { [login]: { email_verified: true } } })
    const linked = await signIn(login)
    expect(linked.user.id).toBe(existing.id)
    expect((await t.deps.store.sso.findLinkedUser(provider.issuer, login))?.id).toBe(existing.id)
    // The password still works beside SSO.
    expect(
      (await t.req('POST', '/v1/auth/login', { body: { email, password: existing.password } })).status,
    ).toBe(200)
  })

  test('an unverified email gets no account and passes no OIDC_ALLOWED_DOMAINS: 403 email_not_verified', async () => {
    const d = await dance(send, APP_PUBLIC_URL, 'victor')
    await refused(d.back, 403, 'email_not_verified')
    expect(await t.deps.store.accounts.findUserByEmail(PEOPLE.victor.email)).toBeUndefined()
    expect(await t.deps.store.sso.findLinkedUser(provider.issuer, 'victor')).toBeUndefined()

    // A linked person whose email the provider no longer vouches for is out too (the domain check).
    const login = await person({ email: uniqueLabEmail() })
    await signIn(login)
    await provider.configure({ accounts: { [login]: { email_verified: false } } })
    await refused((await dance(send, APP_PUBLIC_URL, login)).back, 403, 'email_not_verified')
  })

  test('without OIDC_ALLOWED_DOMAINS an unverified email still makes no account', async () => {
    const open = makeTestApp(ssoEnv(provider))
    try {
      const d = await dance((r) => open.app.handle(r), APP_PUBLIC_URL, 'victor')
      expect(d.back.status).toBe(403)
      const body = (await d.back.json()) as any
      expect(body.error.code).toBe('email_not_verified')
      expect(body.error.message).toContain('an account is made only for a verified email address')
      expect(await open.deps.store.accounts.findUserByEmail(PEOPLE.victor.email)).toBeUndefined()
    } finally {
      open.close()
    }
  })

  test('the admin group makes a superadmin; out of the group, the next sign-in takes the role away', async () => {
    const ada = await signIn('ada')
    expect(ada.platform_role).toBe('superadmin')
    expect((await t.req('GET', '/v1/admin/users', { token: ada.access_token })).status).toBe(200)

    const login = await person({ email: uniqueLabEmail(), groups: [ADMIN_GROUP, 'physics'] })
    expect((await signIn(login)).platform_role).toBe('superadmin')
    await provider.configure({ accounts: { [login]: { groups: ['physics'] } } })
    const demoted = await signIn(login)
    expect(demoted.platform_role).toBe('user')
    expect((await t.req('GET', '/v1/admin/users', { token: demoted.access_token })).status).toBe(403)
  })

  test('a role OIDC_ADMIN_GROUPS changes ends the sessions issued before it; the new session works at once (docs/api.md §1)', async () => {
    await makeSuperadmin(t) // not the last superadmin, whom no sign-in demotes
    const login = await person({ email: uniqueLabEmail(), groups: [ADMIN_GROUP] })
    const admin = await signIn(login)
    const again = await signIn(login)
    // The same role: the earlier session goes on.
    expect((await t.req('GET', '/v1/admin/users', { token: admin.access_token })).status).toBe(200)

    await provider.configure({ accounts: { [login]: { groups: ['physics'] } } })
    const demoted = await signIn(login)
    expect(demoted.platform_role).toBe('user')
    for (const old of [admin, again]) {
      const res = await t.req('GET', '/v1/admin/users', { token: old.access_token })
      expect([res.status, res.body.error.code]).toEqual([401, 'token_revoked'])
    }
    // This server had the user kept under the old token version: forgotten, not a 401.
    expect((await t.req('GET', '/v1/auth/me', { token: demoted.access_token })).body.platform_role).toBe(
      'user',
    )

    // Linked and promoted at once: the password session from before is over too.
    const email = uniqueLabEmail()
    const existing = await makeUser(t, { email })
    expect((await t.req('GET', '/v1/auth/me', { token: existing.token })).status).toBe(200)
    const promoted = await signIn(await person({ email, groups: [ADMIN_GROUP] }))
    expect(promoted).toMatchObject({ platform_role: 'superadmin', user: { id: existing.id } })
    expect((await t.req('GET', '/v1/auth/me', { token: existing.token })).status).toBe(401)
    expect((await t.req('GET', '/v1/admin/users', { token: promoted.access_token })).status).toBe(200)
  })

  test('a person of a domain not allowed gets a 403 and no account', async () => {
    const d = await dance(send, APP_PUBLIC_URL, 'otto')
    await refused(d.back, 403, 'email_domain_not_allowed')
    expect(await t.deps.store.accounts.findUserByEmail(PEOPLE.otto.email)).toBeUndefined()
    expect(await t.deps.store.sso.findLinkedUser(provider.issuer, 'otto')).toBeUndefined()
  })

  test('a disabled account cannot sign in by SSO, nor by password', async () => {
    const email = uniqueLabEmail()
    const existing = await makeUser(t, { email })
    const login = await person({ email })
    expect((await signIn(login)).user.id).toBe(existing.id)
    await t.deps.store.accounts.updateUser(existing.id, { is_active: false }, t.clock.now(), SYSTEM_AUDIT)
    const d = await dance(send, APP_PUBLIC_URL, login)
    await refused(d.back, 403, 'account_disabled')
    const password = await t.req('POST', '/v1/auth/login', { body: { email, password: existing.password } })
    expect(password.status).toBe(403)
    expect(password.body.error.code).toBe('account_disabled')
  })

  test('an account disabled between the callback and the exchange gets no session', async () => {
    const email = uniqueLabEmail()
    const login = await person({ email })
    const d = await dance(send, APP_PUBLIC_URL, login)
    expect(d.back.status).toBe(302)
    const user = (await t.deps.store.accounts.findUserByEmail(email))!
    await t.deps.store.accounts.updateUser(user.id, { is_active: false }, t.clock.now(), SYSTEM_AUDIT)
    const res = await json(await exchange(send, APP_PUBLIC_URL, d))
    expect(res.status).toBe(403)
    expect(res.body.error.code).toBe('account_disabled')
  })

  test('a replayed callback (the same state again) is a 400 invalid_state', async () => {
    const d = await dance(send, APP_PUBLIC_URL, 'alice')
    expect(d.back.status).toBe(302)
    const again = await send(new Request(d.callback, { headers: { cookie: d.jar.header(APP_PUBLIC_URL) } }))
    await refused(again, 400, 'invalid_state')
  })

  test('a callback without the cookie of the browser that started it, with another, or with the state as cookie, is a 400 invalid_state', async () => {
    const mine = new CookieJar()
    const start = await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
    mine.take(APP_PUBLIC_URL, start.headers)
    const callback = await signInAtProvider(start.headers.get('location')!, 'alice')
    await refused(await send(new Request(callback)), 400, 'invalid_state')
    const theirs = new CookieJar()
    theirs.take(APP_PUBLIC_URL, (await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))).headers)
    await refused(
      await send(new Request(callback, { headers: { cookie: theirs.header(APP_PUBLIC_URL) } })),
      400,
      'invalid_state',
    )
    // The state, which the URL shows, is not the cookie: knowing it does not make a browser.
    const state = new URL(callback).searchParams.get('state')
    await refused(
      await send(new Request(callback, { headers: { cookie: `gk_sso=${state}` } })),
      400,
      'invalid_state',
    )
    // No refusal spent the sign-in: with its own cookie it still completes.
    expect(
      (await send(new Request(callback, { headers: { cookie: mine.header(APP_PUBLIC_URL) } }))).status,
    ).toBe(302)
  })

  test('an unknown state, and a sign-in older than 10 minutes, are a 400 invalid_state', async () => {
    const unknown = 'x'.repeat(43)
    await refused(
      await send(
        new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/callback?code=abc&state=${unknown}`, {
          headers: { cookie: `gk_sso=${unknown}` },
        }),
      ),
      400,
      'invalid_state',
    )
    const jar = new CookieJar()
    const start = await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
    jar.take(APP_PUBLIC_URL, start.headers)
    const callback = await signInAtProvider(start.headers.get('location')!, 'alice')
    t.clock.advance(601)
    await refused(
      await send(new Request(callback, { headers: { cookie: jar.header(APP_PUBLIC_URL) } })),
      400,
      'invalid_state',
    )
  })

  test('the one-time code works once, for a minute, in the browser that started the sign-in', async () => {
    const d = await dance(send, APP_PUBLIC_URL, 'alice')
    const first = await exchange(send, APP_PUBLIC_URL, d)
    expect(first.status).toBe(200)
    expect(first.headers.get('set-cookie')).toContain('Max-Age=0')
    const reused = await json(await exchange(send, APP_PUBLIC_URL, d))
    expect(reused.status).toBe(400)
    expect(reused.body.error.code).toBe('invalid_code')

    const elsewhere = await dance(send, APP_PUBLIC_URL, 'alice')
    const noCookie = await json(await exchange(send, APP_PUBLIC_URL, { ...elsewhere, jar: new CookieJar() }))
    expect(noCookie.status).toBe(400)
    expect(noCookie.body.error.code).toBe('invalid_code')

    const late = await dance(send, APP_PUBLIC_URL, 'alice')
    t.clock.advance(61)
    const expired = await json(await exchange(send, APP_PUBLIC_URL, late))
    expect(expired.status).toBe(400)
    expect(expired.body.error.code).toBe('invalid_code')
  })

  test("a provider's code used again, under a fresh state, is refused by the provider: 400 invalid_code", async () => {
    const first = await dance(send, APP_PUBLIC_URL, 'alice')
    expect(first.back.status).toBe(302)
    const jar = new CookieJar()
    const start = await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
    jar.take(APP_PUBLIC_URL, start.headers)
    const state = new URL(start.headers.get('location')!).searchParams.get('state')!
    const replay = new URL(first.callback)
    replay.searchParams.set('state', state)
    const res = await send(new Request(replay.href, { headers: { cookie: jar.header(APP_PUBLIC_URL) } }))
    await refused(res, 400, 'invalid_code')
  })

  test('the provider refusing the sign-in (access_denied) is a 400 sso_refused', async () => {
    const jar = new CookieJar()
    const start = await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
    jar.take(APP_PUBLIC_URL, start.headers)
    const state = new URL(start.headers.get('location')!).searchParams.get('state')!
    const res = await send(
      new Request(
        `${APP_PUBLIC_URL}/v1/auth/oidc/callback?error=access_denied&error_description=End-User+aborted&state=${state}&iss=${encodeURIComponent(provider.issuer)}`,
        { headers: { cookie: jar.header(APP_PUBLIC_URL) } },
      ),
    )
    expect(res.status).toBe(400)
    const body = (await res.json()) as any
    expect(body.error.code).toBe('sso_refused')
    expect(body.error.message).toContain('access_denied')
  })

  test('a malformed callback is a 400 invalid_callback, in the envelope and in words for a browser, never a 5xx', async () => {
    const iss = `iss=${encodeURIComponent(provider.issuer)}`
    const cases: [query: string, param: string, words: string][] = [
      ['', 'state', 'it carries no state'],
      ['code=abc', 'state', 'it carries no state'],
      [`error=access_denied&${iss}`, 'state', 'it carries no state'],
      ['STATE', 'code', 'it carries neither a code nor an error'],
      [`STATE&code=&${iss}`, 'code', 'it carries neither a code nor an error'],
      [`STATE&error=&${iss}`, 'code', 'it carries neither a code nor an error'],
      [`STATE&code=abc&error=access_denied&${iss}`, 'code', 'it carries both a code and an error'],
      [`STATE&code=abc&code=def&${iss}`, 'code', 'code is given more than once'],
      [`STATE&state=other&code=abc&${iss}`, 'state', 'state is given more than once'],
      [`STATE&code=${'c'.repeat(4097)}&${iss}`, 'code', 'code is longer than 4096 characters'],
      // The provider names itself in its answers (RFC 9207): a code or an error without it, or
      // naming another issuer, is no answer of it.
      ['STATE&code=abc', 'iss', 'it does not name its issuer (iss)'],
      ['STATE&error=access_denied', 'iss', 'it does not name its issuer (iss)'],
      ['STATE&code=abc&iss=http%3A%2F%2Fevil.example', 'iss', 'it names another issuer (iss)'],
    ]
    for (const accept of ['application/json', 'text/html']) {
      for (const [query, param, words] of cases) {
        const jar = new CookieJar()
        const start = await send(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
        jar.take(APP_PUBLIC_URL, start.headers)
        const state = new URL(start.headers.get('location')!).searchParams.get('state')!
        const res = await send(
          new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/callback?${query.replace('STATE', `state=${state}`)}`, {
            headers: { accept, cookie: jar.header(APP_PUBLIC_URL) },
          }),
        )
        expect([query, accept, res.status]).toEqual([query, accept, 400])
        if (accept === 'text/html') {
          const page = await res.text()
          expect(page).toContain('Sign-in failed')
          expect(page).toContain(`The identity provider&#39;s answer is malformed: ${words}`)
          expect(page).toContain('400 invalid_callback')
        } else {
          const { error } = (await res.json()) as any
          expect([query, error.code, error.param]).toEqual([query, 'invalid_callback', param])
          expect(error.message).toContain(words)
        }
      }
    }
  })

  test('a browser gets a refusal as a page in words, its cookie cleared', async () => {
    const res = await send(
      new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/callback?code=abc&state=nope`, {
        headers: { accept: 'text/html,application/xhtml+xml', cookie: 'gk_sso=nope' },
      }),
    )
    expect(res.status).toBe(400)
    expect(res.headers.get('content-type')).toStartWith('text/html')
    expect(res.headers.get('set-cookie')).toContain('Max-Age=0')
    const page = await res.text()
    expect(page).toContain('Sign-in failed')
    expect(page).toContain(
      'This sign-in is unknown, was used already, has expired, or was started in another browser',
    )
    expect(page).toContain('href="/"')
  })

  test('starts are limited per client address (RATE_LIMIT_SSO_PER_MINUTE): a 429 that stores nothing', async () => {
    const limited = makeTestApp(ssoEnv(provider, { RATE_LIMIT_SSO_PER_MINUTE: '3' }))
    const start = (headers: Record<string, string> = {}) =>
      limited.app.handle(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`, { headers }))
    const stored = async () => {
      const { db, tables } = rowsOf(limited.deps)
      return Number((await db.select({ n: count() }).from(tables.ssoLogins))[0]!.n)
    }
    try {
      for (let i = 0; i < 3; i++) expect((await start()).status).toBe(302)
      expect(await stored()).toBe(3)
      const refusedStart = await start()
      expect(refusedStart.status).toBe(429)
      expect(refusedStart.headers.get('retry-after')).toBe('60')
      expect(((await refusedStart.json()) as any).error).toMatchObject({
        type: 'rate_limit_error',
        code: 'rate_limit_exceeded',
        message: 'Too many sign-ins were started from this address in the last minute; try again in 60 s',
      })
      // A browser gets it in words, with the same Retry-After.
      const page = await start({ accept: 'text/html' })
      expect(page.status).toBe(429)
      expect(page.headers.get('retry-after')).toBe('60')
      expect(await page.text()).toContain('Too many sign-ins were started from this address')
      expect(await stored()).toBe(3)
      // A minute on, the address may start again.
      limited.clock.advance(60)
      expect((await start()).status).toBe(302)
      expect(await stored()).toBe(4)
    } finally {
      limited.close()
    }
  })

  test('return_to is a path of this server; anything else is a 400', async () => {
    for (const bad of ['//evil.example/x', 'https://evil.example/', '/\\evil.example', 'app/keys']) {
      const res = await t.req('GET', `/v1/auth/oidc/start?return_to=${encodeURIComponent(bad)}`)
      expect(res.status).toBe(400)
      expect(res.body.error.code).toBe('invalid_return_to')
    }
    expect((await t.req('GET', '/v1/auth/oidc/start?unknown=1')).status).toBe(400)
  })

  test('key rotation at the provider: a sign-in after the provider changed its signing key still works', async () => {
    const before = await signIn('alice')
    const oldKid = provider.kid
    await provider.configure({ rotate: true })
    expect(provider.kid).not.toBe(oldKid)
    // openid-client refetches the JWKS for a key id it has not seen, at most once a minute
    // (a token naming unknown keys cannot make it hammer the provider): a minute later…
    setSystemTime(new Date(Date.now() + 61_000))
    try {
      const after = await signIn('alice')
      expect(after.user.id).toBe(before.user.id)
    } finally {
      setSystemTime()
    }
  })
})

test('OIDC_CLIENT_SECRET never reaches the log: a refused client is logged without it, and any line quoting it is redacted', async () => {
  const secret = `client-secret-${crypto.randomUUID()}`
  rememberSecret(secret)
  const t = makeTestApp(ssoEnv(provider, { OIDC_CLIENT_SECRET: secret }))
  try {
    const from = capturedLogLines().length
    // The provider does not know this secret: the token request is refused (invalid_client).
    const d = await dance((r) => t.app.handle(r), APP_PUBLIC_URL, 'alice')
    expect(d.back.status).toBe(502)
    const { error } = (await d.back.json()) as any
    expect(error.code).toBe('sso_provider_unavailable')
    expect(error.message).toContain(
      "refused gridkeep's request (invalid_client); check OIDC_CLIENT_ID and OIDC_CLIENT_SECRET",
    )
    // A line that would quote it, as a library's error text might.
    log.warn(`a message quoting ${secret}`, {
      why: `invalid_client for ${secret}`,
      nested: { detail: secret },
    })
    const lines = capturedLogLines().slice(from)
    expect(
      lines.some((l) => l.includes('identity provider unavailable') && l.includes('invalid_client')),
    ).toBe(true)
    const quoted = lines.find((l) => l.includes('a message quoting'))!
    expect(JSON.parse(quoted)).toMatchObject({
      msg: 'a message quoting [redacted]',
      why: 'invalid_client for [redacted]',
      nested: { detail: '[redacted]' },
    })
    expect(lines.filter((l) => l.includes(secret))).toEqual([])
  } finally {
    t.close()
  }
})

describe("an ID token's expiry, with the small skew, at the real provider", () => {
  test(`just inside ${CLOCK_TOLERANCE_SECONDS} s past exp is accepted; just outside is a 401 invalid_id_token and no account`, async () => {
    const t = makeTestApp(ssoEnv(provider))
    try {
      /** A sign-in whose callback finds our clock `late` seconds past the ID token's exp. */
      const signInLate = (login: string, late: number) =>
        dance(
          async (r) => {
            if (!new URL(r.url).pathname.endsWith('/oidc/callback')) return t.app.handle(r)
            // The provider issues the token during this callback, with its own (real) clock.
            setSystemTime(new Date(Date.now() + (ID_TOKEN_TTL_SECONDS + late) * 1000))
            try {
              return await t.app.handle(r)
            } finally {
              setSystemTime()
            }
          },
          APP_PUBLIC_URL,
          login,
        )
      const outsideEmail = uniqueLabEmail()
      const outside = await signInLate(await person({ email: outsideEmail }), CLOCK_TOLERANCE_SECONDS + 5)
      expect(outside.back.status).toBe(401)
      const body = (await outside.back.json()) as any
      expect(body.error.code).toBe('invalid_id_token')
      expect(body.error.message).toMatch(/exp|timestamp/)
      expect(await t.deps.store.accounts.findUserByEmail(outsideEmail)).toBeUndefined()

      const inside = await signInLate(await person({ email: uniqueLabEmail() }), CLOCK_TOLERANCE_SECONDS - 5)
      expect(inside.back.status).toBe(302)
      expect((await exchange((r) => t.app.handle(r), APP_PUBLIC_URL, inside)).status).toBe(200)
    } finally {
      t.close()
    }
  })
})

describe('OIDC_ADMIN_GROUPS and the last superadmin', () => {
  const noGroupsWarnings = () =>
    capturedLogLines().filter((l) => l.includes('the identity provider sent no groups claim')).length

  test('a provider that sends no groups claim changes no role, and the server says so once', async () => {
    // OIDC_SCOPES without groups: the provider sends no groups claim at all.
    const t = makeTestApp(
      ssoEnv(provider, { OIDC_ADMIN_GROUPS: ADMIN_GROUP, OIDC_SCOPES: 'openid email profile' }),
    )
    const send = (r: Request) => t.app.handle(r)
    try {
      await makeSuperadmin(t)
      const root = await makeSuperadmin(t)
      const login = await person({ email: root.email, groups: [] })
      const before = noGroupsWarnings()
      for (let i = 0; i < 2; i++) {
        const d = await dance(send, APP_PUBLIC_URL, login)
        const answer = await json(await exchange(send, APP_PUBLIC_URL, d))
        expect(answer.body.user.id).toBe(root.id)
        expect(answer.body.platform_role).toBe('superadmin')
      }
      expect((await t.deps.store.accounts.findUserById(root.id))?.platform_role).toBe('superadmin')
      expect(noGroupsWarnings()).toBe(before + 1)
      // A new account without a groups claim is an ordinary user.
      const fresh = await person({ email: uniqueLabEmail(), groups: [ADMIN_GROUP] })
      const d = await dance(send, APP_PUBLIC_URL, fresh)
      expect((await json(await exchange(send, APP_PUBLIC_URL, d))).body.platform_role).toBe('user')
    } finally {
      t.close()
    }
  })

  test('the last active superadmin out of the group keeps the role; the refusal is in the audit log', async () => {
    const t = makeTestApp(ssoEnv(provider, { OIDC_ADMIN_GROUPS: ADMIN_GROUP }))
    const send = (r: Request) => t.app.handle(r)
    try {
      const root = await makeSuperadmin(t)
      const login = await person({ email: root.email, groups: ['physics'] })
      const d = await dance(send, APP_PUBLIC_URL, login)
      const answer = await json(await exchange(send, APP_PUBLIC_URL, d))
      expect(answer.status).toBe(200)
      expect(answer.body).toMatchObject({ platform_role: 'superadmin', user: { id: root.id } })
      expect((await t.req('GET', '/v1/admin/users', { token: answer.body.access_token })).status).toBe(200)
      const refused = await t.req(
        'GET',
        `/v1/audit-events?action=user.role_change_refused&target_id=${root.id}`,
        {
          token: root.token,
        },
      )
      expect(refused.body.data).toEqual([
        expect.objectContaining({
          actor: { kind: 'system', id: null, user_id: null },
          target: { kind: 'user', id: root.id },
          details: {
            from: 'superadmin',
            to: 'user',
            via: 'sso',
            issuer: provider.issuer,
            reason: 'last_superadmin',
          },
        }),
      ])
      expect(
        (
          await t.req('GET', `/v1/audit-events?action=user.role_changed&target_id=${root.id}`, {
            token: root.token,
          })
        ).body.data,
      ).toEqual([])
    } finally {
      t.close()
    }
  })

  test('OIDC_ADMIN_GROUPS without the groups scope: a warning at the start', async () => {
    const before = capturedLogLines().filter((l) => l.includes('does not ask for groups')).length
    const server = await startTestServer(
      ssoEnv(provider, { OIDC_ADMIN_GROUPS: ADMIN_GROUP, OIDC_SCOPES: 'openid email profile' }),
    )
    try {
      const warned = capturedLogLines().filter((l) => l.includes('does not ask for groups'))
      expect(warned).toHaveLength(before + 1)
      expect(JSON.parse(warned.at(-1)!)).toMatchObject({ level: 'warn' })
    } finally {
      await server.stop()
    }
  })
})

describe('a terminal signs in (RFC 8252 loopback redirect with PKCE)', () => {
  let t: TestApp
  const send = (r: Request) => t.app.handle(r)
  beforeAll(() => {
    t = makeTestApp(ssoEnv(provider, { OIDC_ALLOWED_DOMAINS: 'lab.example' }))
  })
  afterAll(() => t.close())

  const verifier = 'v'.repeat(20) + crypto.randomUUID() + 'w'.repeat(10)
  const challenge = () => new Bun.CryptoHasher('sha256').update(verifier).digest('base64url')
  const loopback = 'http://127.0.0.1:53121/callback'
  const terminalQuery = (extra: Record<string, string> = {}) =>
    `?${new URLSearchParams({ redirect_uri: loopback, code_challenge: challenge(), code_challenge_method: 'S256', state: 'terminal-state', ...extra })}`

  async function redeem(code: string, code_verifier?: string) {
    const body = JSON.stringify({ code, ...(code_verifier ? { code_verifier } : {}) })
    return json(
      await send(
        new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': String(body.length) },
          body,
        }),
      ),
    )
  }

  /** A terminal's sign-in as `login`, up to the page asking the person to confirm it. */
  async function asked(login = 'alice') {
    const d = await dance(send, APP_PUBLIC_URL, login, terminalQuery())
    expect(d.back.status).toBe(200)
    return d
  }

  /** The sign-in rows of the app (the one-time code set or not). */
  async function loginRows() {
    const { db, tables } = rowsOf(t.deps)
    return db.select().from(tables.ssoLogins)
  }

  test('the callback asks the person first: "A terminal is asking to sign in as …", and no code exists yet', async () => {
    const d = await asked()
    expect(d.back.headers.get('location')).toBeNull()
    expect(d.back.headers.get('content-type')).toStartWith('text/html')
    expect(d.back.headers.get('content-security-policy')).toContain("frame-ancestors 'none'")
    const page = await d.back.text()
    expect(page).toContain(`A terminal is asking to sign in as ${PEOPLE.alice.email}`)
    expect(page).toContain('127.0.0.1:53121')
    expect(page).toContain('<form method="post" action="/v1/auth/oidc/confirm">')
    expect(page).toContain('>Continue</button>')
    expect(page).toContain('formaction="/v1/auth/oidc/cancel">Cancel</button>')
    // Nothing in the page names the sign-in or a code: the form posts with the browser's cookie.
    expect(page).not.toContain(new URL(d.callback).searchParams.get('state')!)
    expect(page).not.toContain('code=')
    // The sign-in is vouched for, and no one-time code has been made for any loopback.
    const rows = await loginRows()
    const mine = rows.find((r) => r.redirect_uri === loopback && r.user_id !== null && r.code_hash === null)
    expect(mine).toBeDefined()
  })

  test('without the confirmation of the browser that signed in, no code reaches the loopback', async () => {
    const d = await asked()
    const waiting = async () =>
      (await loginRows()).filter(
        (r) => r.redirect_uri === loopback && r.user_id !== null && r.code_hash === null,
      ).length
    const before = await waiting()
    expect(before).toBeGreaterThan(0)
    // A POST without the cookie (another site's form: SameSite=Lax keeps it off), with another
    // browser's, or from another site's page: refused, nothing sent anywhere, nothing spent.
    const other = await dance(send, APP_PUBLIC_URL, 'alice', terminalQuery())
    for (const attempt of [
      await answerTerminal(send, APP_PUBLIC_URL, { jar: new CookieJar() }, 'confirm'),
      await answerTerminal(send, APP_PUBLIC_URL, { jar: new CookieJar() }, 'cancel'),
      await answerTerminal(send, APP_PUBLIC_URL, d, 'confirm', { origin: 'https://evil.example' }),
    ]) {
      expect(attempt.status).toBeGreaterThanOrEqual(400)
      expect(attempt.headers.get('location')).toBeNull()
    }
    // A GET of the confirmation is no answer.
    expect(
      (
        await send(
          new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/confirm`, {
            headers: { cookie: d.jar.header(APP_PUBLIC_URL) },
          }),
        )
      ).status,
    ).toBe(404)
    expect(await waiting()).toBe(before + 1)
    // Its own browser's answer sends the code on; the other sign-in still waits for its own.
    const yes = await answerTerminal(send, APP_PUBLIC_URL, d, 'confirm', { origin: APP_PUBLIC_URL })
    expect(yes.status).toBe(303)
    expect(new URL(yes.headers.get('location')!).searchParams.get('code')).toBeTruthy()
    expect(await waiting()).toBe(before)
    const no = await answerTerminal(send, APP_PUBLIC_URL, other, 'cancel')
    expect(no.status).toBe(303)
    expect(await waiting()).toBe(before - 1)
  })

  test('Continue sends the browser to the loopback with a one-time code, exchanged with the verifier', async () => {
    const d = await asked()
    const yes = await answerTerminal(send, APP_PUBLIC_URL, d, 'confirm')
    expect(yes.status).toBe(303)
    expect(yes.headers.get('set-cookie')).toContain('Max-Age=0')
    const to = new URL(yes.headers.get('location')!)
    expect(`${to.origin}${to.pathname}`).toBe(loopback)
    expect(to.searchParams.get('state')).toBe('terminal-state')
    const code = to.searchParams.get('code')!
    // Answered once: a second Continue finds nothing waiting.
    const twice = await answerTerminal(send, APP_PUBLIC_URL, d, 'confirm')
    expect(twice.status).toBe(400)
    expect(((await twice.json()) as any).error.code).toBe('invalid_state')
    // Without the verifier, or with another, the code is refused (and spent).
    const wrong = await redeem(code, 'x'.repeat(43))
    expect(wrong.status).toBe(400)
    expect(wrong.body.error.code).toBe('invalid_code')
    expect((await redeem(code, verifier)).status).toBe(400)

    const again = await asked()
    const code2 = new URL(
      (await answerTerminal(send, APP_PUBLIC_URL, again, 'confirm')).headers.get('location')!,
    ).searchParams.get('code')!
    const missing = await redeem(code2)
    expect(missing.status).toBe(400)
    const third = await asked()
    const code3 = new URL(
      (await answerTerminal(send, APP_PUBLIC_URL, third, 'confirm')).headers.get('location')!,
    ).searchParams.get('code')!
    const ok = await redeem(code3, verifier)
    expect(ok.status).toBe(200)
    expect(ok.body.user.email).toBe(PEOPLE.alice.email)
  })

  test('Cancel tells the loopback access_denied, and the sign-in is gone', async () => {
    const d = await asked()
    const no = await answerTerminal(send, APP_PUBLIC_URL, d, 'cancel')
    expect(no.status).toBe(303)
    const to = new URL(no.headers.get('location')!)
    expect(`${to.origin}${to.pathname}`).toBe(loopback)
    expect(to.searchParams.get('error')).toBe('access_denied')
    expect(to.searchParams.get('error_description')).toBe('The sign-in was cancelled in the browser')
    expect(to.searchParams.get('state')).toBe('terminal-state')
    expect(to.searchParams.get('code')).toBeNull()
    const late = await answerTerminal(send, APP_PUBLIC_URL, d, 'confirm', { accept: 'text/html' })
    expect(late.status).toBe(400)
    expect(await late.text()).toContain('No sign-in of a terminal waits for confirmation in this browser')
  })

  test("a confirmation later than the sign-in's ten minutes finds nothing", async () => {
    const d = await asked()
    t.clock.advance(601)
    const late = await answerTerminal(send, APP_PUBLIC_URL, d, 'confirm')
    expect(late.status).toBe(400)
    expect(late.headers.get('location')).toBeNull()
  })

  test("a refusal at the callback goes to the terminal's loopback with the error", async () => {
    const d = await dance(send, APP_PUBLIC_URL, 'otto', terminalQuery())
    expect(d.back.status).toBe(302)
    const to = new URL(d.back.headers.get('location')!)
    expect(`${to.origin}${to.pathname}`).toBe(loopback)
    expect(to.searchParams.get('error')).toBe('email_domain_not_allowed')
    expect(to.searchParams.get('error_description')).toContain('elsewhere.example')
    expect(to.searchParams.get('state')).toBe('terminal-state')
    expect(to.searchParams.get('code')).toBeNull()
  })

  test('only a loopback IP address with a port is a redirect target', async () => {
    for (const bad of [
      'http://example.com:8080/cb',
      'http://localhost:8080/cb',
      'https://127.0.0.1:8080/cb',
      'http://127.0.0.1/cb',
      'http://127.0.0.1:8080/cb?x=1',
      'http://user@127.0.0.1:8080/cb',
      'http://10.0.0.1:8080/cb',
    ]) {
      const res = await t.req('GET', `/v1/auth/oidc/start${terminalQuery({ redirect_uri: bad })}`)
      expect(res.status).toBe(400)
      expect(res.body.error.code).toBe('invalid_redirect_uri')
    }
    expect(
      (await t.req('GET', `/v1/auth/oidc/start${terminalQuery({ redirect_uri: 'http://[::1]:8080/cb' })}`))
        .status,
    ).toBe(302)
    const plain = await t.req(
      'GET',
      `/v1/auth/oidc/start${terminalQuery({ code_challenge_method: 'plain' })}`,
    )
    expect(plain.body.error.code).toBe('invalid_code_challenge')
    const short = await t.req('GET', `/v1/auth/oidc/start${terminalQuery({ code_challenge: 'abc' })}`)
    expect(short.body.error.code).toBe('invalid_code_challenge')
  })
})

describe('ID tokens that must be refused (a hand-rolled provider)', () => {
  let fake: FakeOidc
  let t: TestApp
  const send = (r: Request) => t.app.handle(r)
  beforeAll(async () => {
    fake = await startFakeOidc(CLIENT_ID)
    t = makeTestApp(ssoEnv(fake))
  })
  afterAll(() => {
    t.close()
    fake.stop()
  })

  test('the hand-rolled provider signs a good token in (the cases below differ in one thing)', async () => {
    fake.fault = 'none'
    fake.claims = { email: 'fake-good@lab.example', email_verified: true }
    const d = await dance(send, APP_PUBLIC_URL, 'any')
    expect(d.back.status).toBe(302)
    expect((await exchange(send, APP_PUBLIC_URL, d)).status).toBe(200)
  })

  const faults: [TokenFault, RegExp][] = [
    ['wrong_issuer', /iss/],
    ['wrong_audience', /aud/],
    ['expired', /exp|timestamp/],
    ['unsigned', /alg|unsupported|sign/i],
    ['bad_signature', /signature/i],
    ['wrong_nonce', /nonce/],
  ]
  for (const [fault, words] of faults)
    test(`an ID token ${fault.replace('_', ' ')}: 401 invalid_id_token, no account`, async () => {
      fake.fault = fault
      const email = `fake-${fault}@lab.example`
      fake.claims = { email, email_verified: true, sub: `subject-${fault}` }
      const d = await dance(send, APP_PUBLIC_URL, 'any')
      expect(d.back.status).toBe(401)
      const body = (await d.back.json()) as any
      expect(body.error.code).toBe('invalid_id_token')
      expect(body.error.message).toMatch(words)
      expect(await t.deps.store.accounts.findUserByEmail(email)).toBeUndefined()
    })

  test('a token endpoint answering 500 is a 502 sso_provider_unavailable', async () => {
    fake.fault = 'token_endpoint_error'
    const d = await dance(send, APP_PUBLIC_URL, 'any')
    expect(d.back.status).toBe(502)
    expect(((await d.back.json()) as any).error.code).toBe('sso_provider_unavailable')
  })
})

describe('a provider that is away', () => {
  test('unreachable: start answers 502 sso_provider_unavailable at once, as a page for a browser', async () => {
    const closed = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response() })
    const issuer = `http://127.0.0.1:${closed.port}`
    closed.stop(true)
    const t = makeTestApp(ssoEnv({ issuer }))
    try {
      const res = await t.req('GET', '/v1/auth/oidc/start')
      expect(res.status).toBe(502)
      expect(res.body.error.code).toBe('sso_provider_unavailable')
      expect(res.body.error.message).toContain('cannot be reached')
      const page = await t.app.handle(
        new Request('http://gridkeep.test/v1/auth/oidc/start', { headers: { accept: 'text/html' } }),
      )
      expect(page.status).toBe(502)
      expect(await page.text()).toContain('The identity provider cannot be reached')
    } finally {
      t.close()
    }
  })

  test('silent: the request times out after OIDC_TIMEOUT_SECONDS, a 502, not a hang', async () => {
    const silent = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    const t = makeTestApp(
      ssoEnv({ issuer: `http://127.0.0.1:${silent.port}` }, { OIDC_TIMEOUT_SECONDS: '1' }),
    )
    try {
      const res = await t.req('GET', '/v1/auth/oidc/start')
      expect(res.status).toBe(502)
      expect(res.body.error.message).toContain('did not answer within 1 s')
    } finally {
      t.close()
      silent.stop(true)
    }
  })

  test('gone between the start and the callback: the callback answers 502', async () => {
    const fake = await startFakeOidc(CLIENT_ID)
    const t = makeTestApp(ssoEnv(fake))
    try {
      const jar = new CookieJar()
      const start = await t.app.handle(new Request(`${APP_PUBLIC_URL}/v1/auth/oidc/start`))
      jar.take(APP_PUBLIC_URL, start.headers)
      const callback = await signInAtProvider(start.headers.get('location')!, 'any')
      fake.stop()
      const back = await t.app.handle(
        new Request(callback, { headers: { cookie: jar.header(APP_PUBLIC_URL) } }),
      )
      expect(back.status).toBe(502)
      expect(((await back.json()) as any).error.code).toBe('sso_provider_unavailable')
    } finally {
      t.close()
    }
  })
})

describe('without single sign-on, and with passwords off', () => {
  test('without OIDC_ISSUER the SSO endpoints are a 404 sso_not_configured', async () => {
    const t = makeTestApp()
    try {
      expect((await t.req('GET', '/v1/auth/methods')).body.sso).toBeNull()
      for (const [method, path, body] of [
        ['GET', '/v1/auth/oidc/start', undefined],
        ['GET', '/v1/auth/oidc/callback?code=a&state=b', undefined],
        ['POST', '/v1/auth/oidc/token', { code: 'abc' }],
      ] as const) {
        const res = await t.req(method, path, { body })
        expect(res.status).toBe(404)
        expect(res.body.error.code).toBe('sso_not_configured')
      }
    } finally {
      t.close()
    }
  })

  test('PASSWORD_LOGIN=false: login, signup and password resets are a 403; SSO signs in', async () => {
    const t = makeTestApp(ssoEnv(provider, { PASSWORD_LOGIN: 'false' }))
    try {
      expect((await t.req('GET', '/v1/auth/methods')).body).toMatchObject({ password: false, signup: false })
      for (const [path, body] of [
        ['/v1/auth/login', { email: 'admin@localhost', password: 'admin-password-1' }],
        ['/v1/auth/signup', { email: 'new@lab.example', password: 'a-long-password', full_name: 'New' }],
        ['/v1/auth/forgot-password', { email: 'new@lab.example' }],
        ['/v1/auth/reset-password', { token: 'abc', new_password: 'a-long-password' }],
      ] as const) {
        const res = await t.req('POST', path, { body })
        expect(res.status).toBe(403)
        expect(res.body.error.code).toBe('password_login_disabled')
      }
      const d = await dance((r) => t.app.handle(r), APP_PUBLIC_URL, 'alice')
      const session = await json(await exchange((r) => t.app.handle(r), APP_PUBLIC_URL, d))
      expect(session.status).toBe(200)
      // No password is set either: it could never be used.
      const change = await t.req('POST', '/v1/auth/change-password', {
        token: session.body.access_token,
        body: { current_password: 'anything-at-all', new_password: 'a-long-password' },
      })
      expect([change.status, change.body.error.code]).toEqual([403, 'password_login_disabled'])
    } finally {
      t.close()
    }
  })
})

describe('must_change_password is about passwords: a single sign-on session is not held back', () => {
  /** A sign-in by SSO as `login` at `t`: the login answer. */
  async function ssoSession(t: TestApp, login: string) {
    const send = (r: Request) => t.app.handle(r)
    const d = await dance(send, APP_PUBLIC_URL, login)
    expect(d.back.status).toBe(302)
    const answer = await json(await exchange(send, APP_PUBLIC_URL, d))
    expect(answer.status).toBe(200)
    return answer.body
  }

  test('an admin-made account with a first password to change: its SSO session and keys work, its password session still waits', async () => {
    const t = makeTestApp(ssoEnv(provider))
    try {
      const admin = await makeSuperadmin(t)
      const email = uniqueLabEmail()
      const made = await t.req('POST', '/v1/admin/users', {
        token: admin.token,
        body: { email, full_name: 'New Person', password: 'first-password-1' },
      })
      expect(made.body.must_change_password).toBe(true)
      const session = await ssoSession(t, await person({ email }))
      expect(session).toMatchObject({ must_change_password: false, user: { must_change_password: false } })
      const token = session.access_token
      expect((await t.req('GET', '/v1/auth/me', { token })).body.must_change_password).toBe(false)
      expect((await t.req('GET', '/v1/orgs', { token })).status).toBe(200)
      const key = await t.req('POST', '/v1/users/me/api-keys', { token, body: { name: 'cli' } })
      expect(key.status).toBe(201)
      expect((await t.req('GET', '/v1/batches', { token: key.body.key })).status).toBe(200)
      // A password login of the same account is still held back until the password is changed.
      const password = await t.req('POST', '/v1/auth/login', {
        body: { email, password: 'first-password-1' },
      })
      expect(password.body.must_change_password).toBe(true)
      const held = await t.req('GET', '/v1/orgs', { token: password.body.access_token })
      expect([held.status, held.body.error.code]).toEqual([403, 'password_change_required'])
      expect(
        (await t.req('GET', '/v1/auth/me', { token: password.body.access_token })).body.must_change_password,
      ).toBe(true)
    } finally {
      t.close()
    }
  })

  test('PASSWORD_LOGIN=false: an admin makes an account without a password, and its owner signs in by SSO', async () => {
    const t = makeTestApp(ssoEnv(provider, { PASSWORD_LOGIN: 'false' }))
    try {
      const root = await createUser(
        t.deps,
        { email: uniqueLabEmail(), full_name: 'Root', platform_role: 'superadmin' },
        SYSTEM_AUDIT,
      )
      const admin = await ssoSession(t, await person({ email: root.email }))
      const email = uniqueLabEmail()
      const refused = await t.req('POST', '/v1/admin/users', {
        token: admin.access_token,
        body: { email, full_name: 'New Person', password: 'first-password-1' },
      })
      expect([refused.status, refused.body.error.code, refused.body.error.param]).toEqual([
        400,
        'password_login_disabled',
        'password',
      ])
      const made = await t.req('POST', '/v1/admin/users', {
        token: admin.access_token,
        body: { email, full_name: 'New Person' },
      })
      expect(made.status).toBe(201)
      expect(made.body).toMatchObject({ email, must_change_password: false })
      const session = await ssoSession(t, await person({ email }))
      expect(session).toMatchObject({ must_change_password: false, user: { id: made.body.id } })
      expect((await t.req('GET', '/v1/orgs', { token: session.access_token })).status).toBe(200)

      // An account that still has the flag from before passwords were turned off is not stuck either.
      const earlier = await createUser(
        t.deps,
        {
          email: uniqueLabEmail(),
          full_name: 'Earlier',
          password: 'temporary-pass-1',
          must_change_password: true,
        },
        SYSTEM_AUDIT,
      )
      const again = await ssoSession(t, await person({ email: earlier.email }))
      expect(again.must_change_password).toBe(false)
      expect((await t.req('GET', '/v1/orgs', { token: again.access_token })).status).toBe(200)
    } finally {
      t.close()
    }
  })

  test('an account made by SSO has no current password to give: change-password says to set one with forgot-password', async () => {
    const t = makeTestApp(ssoEnv(provider))
    try {
      const session = await ssoSession(t, await person({ email: uniqueLabEmail() }))
      const change = await t.req('POST', '/v1/auth/change-password', {
        token: session.access_token,
        body: { current_password: 'anything-at-all', new_password: 'a-long-password' },
      })
      expect([change.status, change.body.error.code, change.body.error.param]).toEqual([
        400,
        'invalid_current_password',
        'current_password',
      ])
      expect(change.body.error.message).toContain('This account has no password')
      expect((await t.req('GET', '/v1/auth/me', { token: session.access_token })).status).toBe(200)
    } finally {
      t.close()
    }
  })

  test('with passwords on, an admin still gives a first password', async () => {
    const t = makeTestApp(ssoEnv(provider))
    try {
      const admin = await makeSuperadmin(t)
      const res = await t.req('POST', '/v1/admin/users', {
        token: admin.token,
        body: { email: uniqueLabEmail(), full_name: 'No Password' },
      })
      expect([res.status, res.body.error.code, res.body.error.param]).toEqual([
        400,
        'invalid_value',
        'password',
      ])
    } finally {
      t.close()
    }
  })
})
