import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import {
  loginAs,
  makePersonalKey,
  makeSuperadmin,
  makeUser,
  newPassword,
  uniqueEmail,
} from '../helpers/builders'

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
afterAll(() => t.close())

describe('GET /v1/admin/users and /v1/admin/organizations', () => {
  test('list everyone, paginated newest first, without secrets', async () => {
    const sa = await makeSuperadmin(t)
    const u1 = await makeUser(t)
    const u2 = await makeUser(t)
    const page = await t.req('GET', '/v1/admin/users?limit=2', { token: sa.token })
    expect(page.status).toBe(200)
    expect(page.body.data.map((u: any) => u.id)).toEqual([u2.id, u1.id])
    expect(page.body.has_more).toBe(true)
    expect(JSON.stringify(page.body)).not.toContain('argon2')
    const next = await t.req('GET', `/v1/admin/users?limit=100&after=${page.body.last_id}`, {
      token: sa.token,
    })
    expect(next.body.data.map((u: any) => u.id)).toContain(sa.id)
    const orgs = await t.req('GET', '/v1/admin/organizations?limit=1', { token: sa.token })
    expect(orgs.body.data[0]).toMatchObject({
      id: u2.personalOrgId,
      object: 'organization',
      personal: true,
      member_count: 1,
    })
  })

  test('a normal user gets 403, a personal key 401', async () => {
    const u = await makeUser(t)
    const res = await t.req('GET', '/v1/admin/organizations', { token: u.token })
    expect(res.status).toBe(403)
    expect(res.body.error.code).toBe('superadmin_required')
    const key = await makePersonalKey(t, u)
    expect((await t.req('GET', '/v1/admin/users', { token: key.key })).status).toBe(401)
  })
})

describe('POST /v1/admin/users', () => {
  test('creates a user with a Personal Org who must change the password', async () => {
    const sa = await makeSuperadmin(t)
    const email = uniqueEmail('hire')
    const password = newPassword()
    const res = await t.req('POST', '/v1/admin/users', {
      token: sa.token,
      body: { email, full_name: 'New Hire', password },
    })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ email, must_change_password: true, platform_role: 'user' })
    const login = await t.req('POST', '/v1/auth/login', { body: { email, password } })
    expect(login.body.must_change_password).toBe(true)
    const me = await t.req('GET', '/v1/auth/me', { token: login.body.access_token })
    expect(me.body.memberships).toHaveLength(1)
    expect(
      (await t.req('POST', '/v1/admin/users', { token: sa.token, body: { email, full_name: 'X', password } }))
        .status,
    ).toBe(409)
    const withRole = await t.req('POST', '/v1/admin/users', {
      token: sa.token,
      body: { email: uniqueEmail(), full_name: 'X', password, platform_role: 'superadmin' },
    })
    expect(withRole.status).toBe(400)
  })
})

describe('PATCH /v1/admin/users/{id}', () => {
  test('deactivation stops the JWTs and personal keys of that user at once; reactivation restores', async () => {
    const sa = await makeSuperadmin(t)
    const u = await makeUser(t)
    const key = await makePersonalKey(t, u)
    const off = await t.req('PATCH', `/v1/admin/users/${u.id}`, {
      token: sa.token,
      body: { is_active: false },
    })
    expect(off.status).toBe(200)
    expect(off.body.is_active).toBe(false)
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(401)
    expect((await t.req('POST', '/v1/auth/api-keys/regenerate', { token: key.key })).status).toBe(401)
    await t.req('PATCH', `/v1/admin/users/${u.id}`, { token: sa.token, body: { is_active: true } })
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(200)
  })

  test('promotion grants the admin endpoints; the last active superadmin cannot be demoted or deactivated', async () => {
    const solo = makeTestApp()
    const sa = await makeSuperadmin(solo)
    // The first-start superadmin does not exist in makeTestApp (only startServer creates it).
    for (const body of [{ platform_role: 'user' }, { is_active: false }]) {
      const res = await solo.req('PATCH', `/v1/admin/users/${sa.id}`, { token: sa.token, body })
      expect(res.status).toBe(400)
      expect(res.body.error.code).toBe('last_superadmin')
    }
    const u = await makeUser(solo)
    const promoted = await solo.req('PATCH', `/v1/admin/users/${u.id}`, {
      token: sa.token,
      body: { platform_role: 'superadmin' },
    })
    expect(promoted.body.platform_role).toBe('superadmin')
    const promotedAgain = await loginAs(solo, u.email, u.password)
    expect((await solo.req('GET', '/v1/admin/users', { token: promotedAgain.token })).status).toBe(200)
    // Now there are two: one may step down.
    const down = await solo.req('PATCH', `/v1/admin/users/${sa.id}`, {
      token: sa.token,
      body: { platform_role: 'user' },
    })
    expect(down.status).toBe(200)
    const demoted = await loginAs(solo, sa.email, sa.password)
    expect((await solo.req('GET', '/v1/admin/users', { token: demoted.token })).status).toBe(403)
    solo.close()
  })

  test('a new platform role ends the sessions issued before it (docs/api.md §1); the same role, or a key, goes on', async () => {
    const sa = await makeSuperadmin(t)
    const u = await makeUser(t)
    const key = await makePersonalKey(t, u)
    const same = await t.req('PATCH', `/v1/admin/users/${u.id}`, {
      token: sa.token,
      body: { platform_role: 'user' },
    })
    expect(same.status).toBe(200)
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(200)

    const up = await t.req('PATCH', `/v1/admin/users/${u.id}`, {
      token: sa.token,
      body: { platform_role: 'superadmin' },
    })
    expect(up.body.platform_role).toBe('superadmin')
    const before = await t.req('GET', '/v1/auth/me', { token: u.token })
    expect([before.status, before.body.error.code]).toEqual([401, 'token_revoked'])
    expect((await t.req('GET', '/v1/batches', { token: key.key })).status).toBe(200)
    const promoted = await loginAs(t, u.email, u.password)
    expect((await t.req('GET', '/v1/auth/me', { token: promoted.token })).body.platform_role).toBe(
      'superadmin',
    )

    await t.req('PATCH', `/v1/admin/users/${u.id}`, { token: sa.token, body: { platform_role: 'user' } })
    const superSession = await t.req('GET', '/v1/admin/users', { token: promoted.token })
    expect([superSession.status, superSession.body.error.code]).toEqual([401, 'token_revoked'])
    // The admin who made both changes keeps their own session.
    expect((await t.req('GET', '/v1/admin/users', { token: sa.token })).status).toBe(200)
  })

  test('unknown user 404; unknown field and bad value 400', async () => {
    const sa = await makeSuperadmin(t)
    expect(
      (await t.req('PATCH', '/v1/admin/users/user_nope', { token: sa.token, body: { is_active: true } }))
        .status,
    ).toBe(404)
    const u = await makeUser(t)
    expect(
      (await t.req('PATCH', `/v1/admin/users/${u.id}`, { token: sa.token, body: { email: 'x@y.z' } })).status,
    ).toBe(400)
    expect(
      (await t.req('PATCH', `/v1/admin/users/${u.id}`, { token: sa.token, body: { platform_role: 'root' } }))
        .status,
    ).toBe(400)
    await loginAs(t, u.email, u.password)
  })
})
