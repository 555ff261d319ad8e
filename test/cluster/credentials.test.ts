import { afterAll, beforeAll, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { CREDENTIAL_MAX_AGE_SECONDS } from '../../src/http/credential-cache'
import { startTestServer, type TestServer } from '../helpers/app'
import { makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey, newPassword } from '../helpers/builders'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import { rememberSecret } from '../helpers/secrets'
import { eventually } from '../helpers/until'
import { registerBody } from '../helpers/workers'

// docs/api.md §12: each instance keeps the credentials it has seen (http/credential-cache.ts).
// A write on one instance holds there from the next request, and reaches the other through its
// `credentials_changed` signal (NOTIFY). Both clocks stand still, so the safety age never expires
// an entry unless a test moves a clock: what B sees changing is the signal's doing.

describeWith(postgres, 'two instances share credentials', () => {
  let a: TestServer
  let b: TestServer

  beforeAll(async () => {
    const env = { DATABASE_URL: await freshPostgresUrl(), DATABASE_POOL_SIZE: '8' }
    a = await startTestServer(env)
    b = await startTestServer(env)
  })
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
  })

  const me = (on: TestServer, token: string) => on.req('GET', '/v1/auth/me', { token })
  const files = (on: TestServer, token: string) => on.req('GET', '/v1/files', { token })
  const register = (on: TestServer, key: string) =>
    on.req('POST', '/workers/register', { token: key, body: registerBody() })

  /** Asks `request` until it answers `status`: the signal's trip, bounded well below any test timeout. */
  const untilStatus = (request: () => Promise<{ status: number }>, status: number) =>
    eventually(async () => expect((await request()).status).toBe(status), 10_000)

  test('keys revoked, given an expiry or rotated on A are refused on B', async () => {
    const u = await makeUser(a)
    const [revoked, expiring, rotated, other] = [
      await makePersonalKey(a, u),
      await makePersonalKey(a, u),
      await makePersonalKey(a, u),
      await makePersonalKey(a, u),
    ]
    const worker = await makeWorkerKey(a, u, u.personalOrgId)
    for (const k of [revoked, expiring, rotated, other]) expect((await files(b, k.key)).status).toBe(200)
    expect((await register(b, worker.key)).status).toBe(200)

    expect((await a.req('DELETE', `/v1/users/me/api-keys/${revoked.id}`, { token: u.token })).status).toBe(
      200,
    )
    // On the instance that revoked it, at once.
    expect((await files(a, revoked.key)).status).toBe(401)
    await untilStatus(() => files(b, revoked.key), 401)

    const body = { expires_at: b.clock.now() + 1 }
    expect(
      (await a.req('PUT', `/v1/users/me/api-keys/${expiring.id}`, { token: u.token, body })).status,
    ).toBe(200)
    // Within the safety age: only the signal can bring the new expiry to B.
    b.clock.advance(1)
    await untilStatus(() => files(b, expiring.key), 401)

    const regen = { token: u.token, body: { key_id: rotated.id } }
    expect((await a.req('POST', '/v1/auth/api-keys/regenerate', regen)).status).toBe(201)
    await untilStatus(() => files(b, rotated.key), 401)

    expect(
      (await a.req('DELETE', `/v1/orgs/${u.personalOrgId}/api-keys/${worker.id}`, { token: u.token })).status,
    ).toBe(200)
    await untilStatus(() => register(b, worker.key), 401)

    expect((await a.req('POST', '/v1/auth/api-keys/regenerate', { token: u.token })).status).toBe(201)
    await untilStatus(() => files(b, other.key), 401)
  })

  test('a user deactivated or given another role on A: B follows', async () => {
    const admin = await makeSuperadmin(a)
    const u = await makeUser(a)
    const k = await makePersonalKey(a, u)
    expect((await me(b, u.token)).status).toBe(200)
    expect((await files(b, k.key)).status).toBe(200)
    const patch = (body: object) => a.req('PATCH', `/v1/admin/users/${u.id}`, { token: admin.token, body })

    expect((await patch({ is_active: false })).status).toBe(200)
    await untilStatus(() => me(b, u.token), 401)
    await untilStatus(() => files(b, k.key), 401)
    expect((await patch({ is_active: true })).status).toBe(200)
    await untilStatus(() => me(b, u.token), 200)

    // A new role ends the older JWTs (docs/api.md §1); the key goes on with the new role.
    const adminView = () => b.req('GET', `/v1/audit-events?org_id=${admin.personalOrgId}`, { token: k.key })
    expect((await adminView()).status).toBe(404)
    expect((await patch({ platform_role: 'superadmin' })).status).toBe(200)
    await untilStatus(() => me(b, u.token), 401)
    await untilStatus(adminView, 200)
    expect((await patch({ platform_role: 'user' })).status).toBe(200)
    await untilStatus(adminView, 404)
  })

  test('a password changed or reset on A ends older JWTs on B', async () => {
    const u = await makeUser(a)
    expect((await me(b, u.token)).status).toBe(200)
    const new_password = newPassword()
    rememberSecret(new_password)
    const changed = await a.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: u.password, new_password },
    })
    expect(changed.status).toBe(200)
    await untilStatus(() => me(b, u.token), 401)

    const fresh = changed.body.access_token as string
    expect((await me(b, fresh)).status).toBe(200)
    expect((await a.req('POST', '/v1/auth/forgot-password', { body: { email: u.email } })).status).toBe(202)
    const mail = a.mail.sent.filter((m) => m.to === u.email).at(-1)!
    const token = /token=([\w-]+)/.exec(mail.text)![1]!
    rememberSecret(token)
    const again = newPassword()
    rememberSecret(again)
    const reset = await a.req('POST', '/v1/auth/reset-password', { body: { token, new_password: again } })
    expect(reset.status).toBe(200)
    await untilStatus(() => me(b, fresh), 401)
  })

  test('a lost signal delays a change on B by at most the safety age', async () => {
    const u = await makeUser(a)
    expect((await me(b, u.token)).status).toBe(200)
    // Written straight to the database: no signal is sent, as when a NOTIFY is lost.
    await a.deps.store.accounts.updateUser(u.id, { is_active: false }, a.clock.now(), SYSTEM_AUDIT)
    b.clock.advance(CREDENTIAL_MAX_AGE_SECONDS)
    expect((await me(b, u.token)).status).toBe(401)
  })
})
