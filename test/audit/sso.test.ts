import { afterAll, beforeAll, expect, test } from 'bun:test'
import type { AuditActor } from '../../src/domain/audit'
import { makeTestApp, type TestApp } from '../helpers/app'
import { auditEntries, oneEntry } from '../helpers/audit'
import { type MadeUser, makeSuperadmin, makeUser } from '../helpers/builders'
import {
  ADMIN_GROUP,
  APP_PUBLIC_URL,
  type Dance,
  dance,
  exchange,
  PEOPLE,
  ssoEnv,
  startOidcProvider,
  type TestProvider,
} from '../helpers/oidc-provider'

// docs/api.md §17 for single sign-on (docs/api.md §2): an SSO sign-in is audited through the same
// hooks as a password one — auth.signed_in with method sso, user.created via sso at the first
// sign-in, user.identity_linked when an account is joined, user.role_changed by OIDC_ADMIN_GROUPS
// (the server's act, in the sign-in's transaction), and auth.sign_in_failed for each refusal —
// against the real provider (oidc-provider in its own process) of test/auth/sso.test.ts.

let provider: TestProvider
let t: TestApp
let admin: MadeUser
const send = (r: Request) => t.app.handle(r)
/** Every state, code and token the sign-ins handled: no entry may hold one. */
const secrets: string[] = []

beforeAll(async () => {
  provider = await startOidcProvider()
  t = makeTestApp(ssoEnv(provider, { OIDC_ADMIN_GROUPS: ADMIN_GROUP, OIDC_ALLOWED_DOMAINS: 'lab.example' }))
  admin = await makeSuperadmin(t)
})
afterAll(() => {
  t?.close()
  provider?.stop()
})

const ANONYMOUS: AuditActor = { kind: 'anonymous', id: null, user_id: null }
const SYSTEM: AuditActor = { kind: 'system', id: null, user_id: null }
const byUser = (id: string): AuditActor => ({ kind: 'user', id, user_id: id })

let people = 0
/** A new person at the provider, verified and in no group unless `claims` say otherwise. */
async function person(claims: Partial<(typeof PEOPLE)['alice']> & { email: string }) {
  const id = `audit-${++people}-${crypto.randomUUID().slice(0, 8)}`
  await provider.configure({
    accounts: { [id]: { email_verified: true, name: `Audited ${people}`, groups: [], ...claims } },
  })
  return id
}
const labEmail = () => `a-${crypto.randomUUID().slice(0, 12)}@lab.example`

/** The credentials a sign-in carried: the state, the provider's code, the one-time code. */
function keepSecrets(d: Dance) {
  const callback = new URL(d.callback).searchParams
  const location = d.back.headers.get('location') ?? ''
  const code = new URLSearchParams(location.slice(location.indexOf('#') + 1)).get('code')
  for (const s of [callback.get('state'), callback.get('code'), code]) if (s) secrets.push(s)
}

/** A whole sign-in: the dance, then the exchange; returns the login answer. */
async function signIn(login: string) {
  const d = await dance(send, APP_PUBLIC_URL, login)
  keepSecrets(d)
  expect(d.back.status).toBe(302)
  const res = await exchange(send, APP_PUBLIC_URL, d)
  expect(res.status).toBe(200)
  const body = (await res.json()) as { access_token: string; user: { id: string; email: string } }
  secrets.push(body.access_token)
  return body
}

/** A sign-in the callback refuses with `code`. */
async function refusedAt(login: string, status: number, code: string) {
  const d = await dance(send, APP_PUBLIC_URL, login)
  keepSecrets(d)
  expect(d.back.status).toBe(status)
  expect(((await d.back.json()) as any).error.code).toBe(code)
}

test('the first sign-in: user.created via sso with the issuer, then auth.signed_in with method sso', async () => {
  const email = labEmail()
  const login = await person({ email })
  const answer = await signIn(login)
  const id = answer.user.id
  const created = await oneEntry(t, admin, 'user.created', id)
  expect(created).toMatchObject({
    actor: ANONYMOUS,
    target: { kind: 'user', id },
    org_id: null,
    details: { email, platform_role: 'user', via: 'sso', issuer: provider.issuer, subject: login },
  })
  const signedIn = await oneEntry(t, admin, 'auth.signed_in', id)
  expect(signedIn).toMatchObject({ actor: byUser(id), details: { method: 'sso' } })
  // A second sign-in is one more auth.signed_in, and no second account.
  await signIn(login)
  expect(
    (await auditEntries(t, admin, { action: 'auth.signed_in', target_id: id })).map((e) => e.details),
  ).toEqual([{ method: 'sso' }, { method: 'sso' }])
  await oneEntry(t, admin, 'user.created', id)
  // Neither a linking nor a role change happened.
  expect(await auditEntries(t, admin, { action: 'user.identity_linked', target_id: id })).toEqual([])
  expect(await auditEntries(t, admin, { action: 'user.role_changed', target_id: id })).toEqual([])
  // The account has no password: a password login is refused and recorded as any wrong one.
  const guessed = await t.req('POST', '/v1/auth/login', { body: { email, password: 'not-a-password-here' } })
  expect(guessed.status).toBe(401)
  const failed = await oneEntry(t, admin, 'auth.sign_in_failed', id)
  expect(failed.details).toEqual({ email, reason: 'invalid_credentials', method: 'password' })
})

test('an existing account joined through its verified email: user.identity_linked by that user', async () => {
  const email = labEmail()
  const existing = await makeUser(t, { email })
  const login = await person({ email })
  const answer = await signIn(login)
  expect(answer.user.id).toBe(existing.id)
  const linked = await oneEntry(t, admin, 'user.identity_linked', existing.id)
  expect(linked).toMatchObject({
    actor: byUser(existing.id),
    target: { kind: 'user', id: existing.id },
    details: { issuer: provider.issuer, subject: login, email },
  })
  expect(
    (await auditEntries(t, admin, { action: 'user.created', target_id: existing.id })).map(
      (e) => e.details.via,
    ),
  ).toEqual(['signup'])
  // Signing in again links nothing more.
  await signIn(login)
  await oneEntry(t, admin, 'user.identity_linked', existing.id)
})

test('OIDC_ADMIN_GROUPS: each role it grants or takes away at a sign-in is one user.role_changed by the system', async () => {
  // Made a superadmin at the first sign-in: the role is in user.created, no change recorded.
  const email = labEmail()
  const login = await person({ email, groups: [ADMIN_GROUP] })
  const id = (await signIn(login)).user.id
  expect((await oneEntry(t, admin, 'user.created', id)).details.platform_role).toBe('superadmin')
  expect(await auditEntries(t, admin, { action: 'user.role_changed', target_id: id })).toEqual([])

  // Out of the group: the next sign-in demotes, with its entry.
  await provider.configure({ accounts: { [login]: { groups: ['physics'] } } })
  await signIn(login)
  const demoted = await oneEntry(t, admin, 'user.role_changed', id)
  expect(demoted).toMatchObject({
    actor: SYSTEM,
    target: { kind: 'user', id },
    details: { from: 'superadmin', to: 'user', via: 'sso', issuer: provider.issuer },
  })
  // Still out: no change, no entry.
  await signIn(login)
  await oneEntry(t, admin, 'user.role_changed', id)

  // An existing account linked while in the group: linked and promoted in one sign-in.
  const existingEmail = labEmail()
  const existing = await makeUser(t, { email: existingEmail })
  const member = await person({ email: existingEmail, groups: [ADMIN_GROUP] })
  await signIn(member)
  await oneEntry(t, admin, 'user.identity_linked', existing.id)
  const promoted = await oneEntry(t, admin, 'user.role_changed', existing.id)
  expect(promoted).toMatchObject({
    actor: SYSTEM,
    details: { from: 'user', to: 'superadmin', via: 'sso', issuer: provider.issuer },
  })
})

test('refused sign-ins: auth.sign_in_failed with the reason, and nothing made or linked', async () => {
  const failures = async (email: string) =>
    (await auditEntries(t, admin, { action: 'auth.sign_in_failed' })).filter((e) => e.details.email === email)

  // A domain OIDC_ALLOWED_DOMAINS does not admit (otto@elsewhere.example).
  await refusedAt('otto', 403, 'email_domain_not_allowed')
  const [domain] = await failures(PEOPLE.otto.email)
  expect(domain).toMatchObject({
    actor: ANONYMOUS,
    target: { kind: 'user', id: null },
    details: {
      email: PEOPLE.otto.email,
      reason: 'email_domain_not_allowed',
      method: 'sso',
      issuer: provider.issuer,
    },
  })
  expect(await failures(PEOPLE.otto.email)).toHaveLength(1)

  // An existing account's email the provider has not verified: the account it would have joined.
  const email = labEmail()
  const existing = await makeUser(t, { email })
  const unverified = await person({ email, email_verified: false })
  await refusedAt(unverified, 403, 'email_not_verified')
  const notVerified = await oneEntry(t, admin, 'auth.sign_in_failed', existing.id)
  expect(notVerified.details).toEqual({
    email,
    reason: 'email_not_verified',
    method: 'sso',
    issuer: provider.issuer,
  })
  expect(await auditEntries(t, admin, { action: 'user.identity_linked', target_id: existing.id })).toEqual([])

  // An email the provider has not verified, with no account behind it: no account is made.
  await refusedAt('victor', 403, 'email_not_verified')
  const [unverifiedNew] = await failures(PEOPLE.victor.email)
  expect(unverifiedNew).toMatchObject({
    actor: ANONYMOUS,
    target: { kind: 'user', id: null },
    details: {
      email: PEOPLE.victor.email,
      reason: 'email_not_verified',
      method: 'sso',
      issuer: provider.issuer,
    },
  })
  expect(await failures(PEOPLE.victor.email)).toHaveLength(1)
  expect(await t.deps.store.accounts.findUserByEmail(PEOPLE.victor.email)).toBeUndefined()

  // A deactivated account, at the callback.
  const offEmail = labEmail()
  const off = await person({ email: offEmail })
  const offId = (await signIn(off)).user.id
  const deactivated = await t.req('PATCH', `/v1/admin/users/${offId}`, {
    token: admin.token,
    body: { is_active: false },
  })
  expect(deactivated.status).toBe(200)
  await refusedAt(off, 403, 'account_disabled')
  const disabled = await oneEntry(t, admin, 'auth.sign_in_failed', offId)
  expect(disabled).toMatchObject({
    actor: ANONYMOUS,
    details: { email: offEmail, reason: 'account_disabled', method: 'sso', issuer: provider.issuer },
  })
})

test('an account deactivated between the callback and the exchange: auth.sign_in_failed at the exchange, no session entry', async () => {
  const email = labEmail()
  const login = await person({ email })
  const d = await dance(send, APP_PUBLIC_URL, login)
  keepSecrets(d)
  expect(d.back.status).toBe(302)
  const user = (await t.deps.store.accounts.findUserByEmail(email))!
  expect(
    (await t.req('PATCH', `/v1/admin/users/${user.id}`, { token: admin.token, body: { is_active: false } }))
      .status,
  ).toBe(200)
  expect((await exchange(send, APP_PUBLIC_URL, d)).status).toBe(403)
  const refused = await oneEntry(t, admin, 'auth.sign_in_failed', user.id)
  expect(refused.details).toEqual({ email, reason: 'account_disabled', method: 'sso' })
  expect(await auditEntries(t, admin, { action: 'auth.signed_in', target_id: user.id })).toEqual([])
})

test('no entry holds a state, a code or a session token of a sign-in', async () => {
  expect(secrets.length).toBeGreaterThan(10)
  const all = JSON.stringify(await auditEntries(t, admin))
  for (const s of secrets) expect(all.includes(s)).toBe(false)
})
