import { afterAll, describe, expect, spyOn, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import {
  CREDENTIAL_MAX_AGE_SECONDS,
  CREDENTIALS_KEPT,
  CredentialCache,
} from '../../src/http/credential-cache'
import type { KeyCredential } from '../../src/store/keys'
import { makeTestApp } from '../helpers/app'
import { makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey, newPassword } from '../helpers/builders'
import { rememberSecret } from '../helpers/secrets'
import { registerBody } from '../helpers/workers'

// Credentials kept per server (http/credential-cache.ts): a request whose key or user was
// seen a moment ago reads nothing, and every write that changes a credential holds from the very
// next request. The test clock stands still, so the safety age never expires an entry here unless
// a test moves the clock: whatever changes is the invalidation's doing.

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0', RATE_LIMIT_FORGOT_PER_HOUR: '0' })
afterAll(() => t.close())

const me = (token: string) => t.req('GET', '/v1/auth/me', { token })
const files = (token: string) => t.req('GET', '/v1/files', { token })
const register = (key: string) => t.req('POST', '/workers/register', { token: key, body: registerBody() })

/** Store reads of credentials made while `run` runs. */
async function credentialReads(run: () => Promise<unknown>) {
  const keys = spyOn(t.deps.store.keys, 'findCredentialByKeyHash')
  const users = spyOn(t.deps.store.accounts, 'findUserById')
  try {
    await run()
    return { keys: keys.mock.calls.length, users: users.mock.calls.length }
  } finally {
    keys.mockRestore()
    users.mockRestore()
  }
}

describe('credentials kept per server', () => {
  test('a JWT, personal key or worker key seen before costs no store read', async () => {
    const u = await makeUser(t)
    const personal = await makePersonalKey(t, u)
    const worker = await makeWorkerKey(t, u, u.personalOrgId)
    expect((await me(u.token)).status).toBe(200)
    expect((await files(personal.key)).status).toBe(200)
    expect((await register(worker.key)).status).toBe(200)
    const reads = await credentialReads(async () => {
      expect((await me(u.token)).status).toBe(200)
      expect((await files(personal.key)).status).toBe(200)
      expect((await register(worker.key)).status).toBe(200)
    })
    expect(reads).toEqual({ keys: 0, users: 0 })
  })

  test('a key use is still recorded at minute resolution', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    const uses = spyOn(t.deps.store.keys, 'recordKeyUse')
    try {
      await files(k.key)
      await files(k.key)
      expect(uses.mock.calls.length).toBe(1)
      t.clock.advance(60)
      await files(k.key)
      await files(k.key)
      expect(uses.mock.calls.length).toBe(2)
    } finally {
      uses.mockRestore()
    }
    const row = await t.deps.store.keys.findKey({ type: 'personal', userId: u.id }, k.id)
    expect(row?.last_used_at).toBe(t.clock.now())
  })
})

describe('every write that changes a credential holds from the very next request', () => {
  test('a personal key revoked (DELETE, and PUT revoked) → 401 at once', async () => {
    const u = await makeUser(t)
    const [a, b] = [await makePersonalKey(t, u), await makePersonalKey(t, u)]
    for (const k of [a, b]) expect((await files(k.key)).status).toBe(200)
    expect((await t.req('DELETE', `/v1/users/me/api-keys/${a.id}`, { token: u.token })).status).toBe(200)
    const put = await t.req('PUT', `/v1/users/me/api-keys/${b.id}`, {
      token: u.token,
      body: { revoked: true },
    })
    expect(put.status).toBe(200)
    for (const k of [a, b]) {
      const res = await files(k.key)
      expect(res.status).toBe(401)
      expect(res.body.error.code).toBe('api_key_revoked')
    }
  })

  test('a new expiry holds from the next request', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    expect((await files(k.key)).status).toBe(200)
    const body = { expires_at: t.clock.now() + 1 }
    expect((await t.req('PUT', `/v1/users/me/api-keys/${k.id}`, { token: u.token, body })).status).toBe(200)
    t.clock.advance(1) // well within the safety age
    const res = await files(k.key)
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('api_key_expired')
  })

  test('a worker key revoked → 401 on the next daemon request', async () => {
    const u = await makeUser(t)
    const k = await makeWorkerKey(t, u, u.personalOrgId)
    expect((await register(k.key)).status).toBe(200)
    const del = await t.req('DELETE', `/v1/orgs/${u.personalOrgId}/api-keys/${k.id}`, { token: u.token })
    expect(del.status).toBe(200)
    const res = await register(k.key)
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('api_key_revoked')
  })

  test('regenerate with key_id, and without (every key of the owner), for personal and worker keys', async () => {
    const u = await makeUser(t)
    const [p1, p2, p3] = [
      await makePersonalKey(t, u),
      await makePersonalKey(t, u),
      await makePersonalKey(t, u),
    ]
    const [w1, w2] = [await makeWorkerKey(t, u, u.personalOrgId), await makeWorkerKey(t, u, u.personalOrgId)]
    for (const k of [p1, p2, p3]) expect((await files(k.key)).status).toBe(200)
    for (const k of [w1, w2]) expect((await register(k.key)).status).toBe(200)

    const one = await t.req('POST', '/v1/auth/api-keys/regenerate', {
      token: u.token,
      body: { key_id: p1.id },
    })
    expect(one.status).toBe(201)
    expect((await files(p1.key)).status).toBe(401)
    expect((await files(p2.key)).status).toBe(200)
    const all = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: u.token })
    expect(all.status).toBe(201)
    for (const k of [p2, p3]) expect((await files(k.key)).body.error.code).toBe('api_key_revoked')
    expect((await files(all.body.key)).status).toBe(200)

    const regen = `/v1/orgs/${u.personalOrgId}/api-keys/regenerate`
    expect((await t.req('POST', regen, { token: u.token, body: { key_id: w1.id } })).status).toBe(201)
    expect((await register(w1.key)).status).toBe(401)
    expect((await register(w2.key)).status).toBe(200)
    expect((await t.req('POST', regen, { token: u.token })).status).toBe(201)
    expect((await register(w2.key)).body.error.code).toBe('api_key_revoked')
  })

  test('a user deactivated → their JWT and personal keys are 401; reactivated → accepted again', async () => {
    const admin = await makeSuperadmin(t)
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    expect((await me(u.token)).status).toBe(200)
    expect((await files(k.key)).status).toBe(200)
    const patch = (is_active: boolean) =>
      t.req('PATCH', `/v1/admin/users/${u.id}`, { token: admin.token, body: { is_active } })
    expect((await patch(false)).status).toBe(200)
    expect((await me(u.token)).status).toBe(401)
    expect((await files(k.key)).status).toBe(401)
    expect((await patch(true)).status).toBe(200)
    expect((await me(u.token)).status).toBe(200)
    expect((await files(k.key)).status).toBe(200)
  })

  test('a platform role granted or taken holds from the next request: older JWTs 401 token_revoked, a key with the new role', async () => {
    const admin = await makeSuperadmin(t)
    const u = await makeUser(t)
    const key = await makePersonalKey(t, u)
    // Another org's audit log: a superadmin's to read (docs/api.md §17), no one else's.
    const adminView = () => t.req('GET', `/v1/audit-events?org_id=${admin.personalOrgId}`, { token: key.key })
    expect((await adminView()).status).toBe(404)
    expect((await me(u.token)).status).toBe(200)
    const role = (platform_role: string) =>
      t.req('PATCH', `/v1/admin/users/${u.id}`, { token: admin.token, body: { platform_role } })
    expect((await role('superadmin')).status).toBe(200)
    expect((await adminView()).status).toBe(200)
    const old = await me(u.token)
    expect([old.status, old.body.error.code]).toEqual([401, 'token_revoked'])
    expect((await role('user')).status).toBe(200)
    expect((await adminView()).status).toBe(404)
  })

  test('a password change → older JWTs are 401 token_revoked; the new one works', async () => {
    const u = await makeUser(t)
    expect((await me(u.token)).status).toBe(200)
    const new_password = newPassword()
    rememberSecret(new_password)
    const changed = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: u.password, new_password },
    })
    expect(changed.status).toBe(200)
    const old = await me(u.token)
    expect(old.status).toBe(401)
    expect(old.body.error.code).toBe('token_revoked')
    expect((await me(changed.body.access_token)).status).toBe(200)
  })

  test('a password reset → older JWTs are 401 token_revoked', async () => {
    const u = await makeUser(t)
    expect((await me(u.token)).status).toBe(200)
    expect((await t.req('POST', '/v1/auth/forgot-password', { body: { email: u.email } })).status).toBe(202)
    const mail = t.mail.sent.filter((m) => m.to === u.email).at(-1)!
    const token = /token=([\w-]+)/.exec(mail.text)![1]!
    rememberSecret(token)
    const new_password = newPassword()
    rememberSecret(new_password)
    const reset = await t.req('POST', '/v1/auth/reset-password', { body: { token, new_password } })
    expect(reset.status).toBe(200)
    expect((await me(u.token)).body.error.code).toBe('token_revoked')
  })

  test('a change made behind the server (another process) is seen after the safety age', async () => {
    const u = await makeUser(t)
    expect((await me(u.token)).status).toBe(200)
    // The store written directly, as the CLI would: no invalidation reaches this server.
    await t.deps.store.accounts.updateUser(u.id, { is_active: false }, t.clock.now(), SYSTEM_AUDIT)
    t.clock.advance(CREDENTIAL_MAX_AGE_SECONDS)
    expect((await me(u.token)).status).toBe(401)
  })
})

describe('CredentialCache', () => {
  const credential = (id: string, o: Partial<KeyCredential> = {}): KeyCredential => ({
    id,
    key_type: 'personal',
    org_id: null,
    user_id: 'user_1',
    expires_at: null,
    last_used_at: null,
    revoked_at: null,
    ...o,
  })

  /** A store read that counts its calls. */
  function counted<T>(value: T) {
    const c = {
      calls: 0,
      read: async () => {
        c.calls++
        return value
      },
    }
    return c
  }

  test('a read that began before a forget is returned but not kept', async () => {
    const cache = new CredentialCache()
    let release!: (v: KeyCredential) => void
    const pending = cache.key('h', 0, () => new Promise((r) => (release = r)))
    cache.forget(['key_1'])
    release(credential('key_1'))
    expect((await pending)?.id).toBe('key_1')
    const again = counted(credential('key_1'))
    await cache.key('h', 0, again.read)
    await cache.key('h', 0, again.read)
    expect(again.calls).toBe(1)
  })

  test('forget drops keys by their own id, their user or their org, and users by id', async () => {
    const cache = new CredentialCache()
    await cache.key('a', 0, async () => credential('key_a'))
    await cache.key('b', 0, async () => credential('key_b', { user_id: 'user_2' }))
    await cache.key('c', 0, async () =>
      credential('key_c', { key_type: 'worker', user_id: null, org_id: 'org_1' }),
    )
    await cache.user('user_1', 0, async () => ({ id: 'user_1' }) as never)
    cache.forget(['user_2'])
    expect(cache.size).toEqual({ keys: 2, users: 1 })
    cache.forget(['org_1', 'key_a'])
    expect(cache.size).toEqual({ keys: 0, users: 1 })
    cache.forget(['user_1'])
    expect(cache.size).toEqual({ keys: 0, users: 0 })
  })

  test('an entry is used for CREDENTIAL_MAX_AGE_SECONDS, then read again; unknown ones are never kept', async () => {
    const cache = new CredentialCache()
    const kept = counted(credential('key_1'))
    await cache.key('h', 100, kept.read)
    await cache.key('h', 100 + CREDENTIAL_MAX_AGE_SECONDS - 1, kept.read)
    expect(kept.calls).toBe(1)
    await cache.key('h', 100 + CREDENTIAL_MAX_AGE_SECONDS, kept.read)
    expect(kept.calls).toBe(2)
    const unknown = counted(undefined)
    for (let i = 0; i < 3; i++) await cache.key('unknown', 100, unknown.read)
    expect(unknown.calls).toBe(3)
  })

  test('bounded: the oldest entry goes when CREDENTIALS_KEPT are kept', async () => {
    const cache = new CredentialCache()
    for (let i = 0; i <= CREDENTIALS_KEPT; i++)
      await cache.key(`h${i}`, 0, async () => credential(`key_${i}`))
    expect(cache.size.keys).toBe(CREDENTIALS_KEPT)
    const oldest = counted(credential('key_0'))
    const newest = counted(credential(`key_${CREDENTIALS_KEPT}`))
    await cache.key('h0', 0, oldest.read)
    await cache.key(`h${CREDENTIALS_KEPT}`, 0, newest.read)
    expect([oldest.calls, newest.calls]).toEqual([1, 0])
  })
})
