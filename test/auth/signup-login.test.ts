import { afterAll, describe, expect, test } from 'bun:test'
import { ensureSuperadmin } from '../../src/modules/auth/service'
import { makeTestApp } from '../helpers/app'
import {
  loginAs,
  makeSuperadmin,
  makeUser,
  newPassword,
  setUserFlags,
  uniqueEmail,
} from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

const t = makeTestApp({ RATE_LIMIT_LOGIN_PER_MINUTE: '3' })
afterAll(() => t.close())

const signup = (body: Record<string, unknown>) => t.req('POST', '/v1/auth/signup', { body })

describe('POST /v1/auth/signup', () => {
  test('creates the user, returns exactly the docs/api.md fields and no key', async () => {
    const email = uniqueEmail()
    const res = await signup({
      email: `  ${email.toUpperCase()} `,
      password: newPassword(),
      full_name: 'Ada',
    })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(
      [
        'created_at',
        'email',
        'full_name',
        'id',
        'is_active',
        'must_change_password',
        'object',
        'platform_role',
      ].sort(),
    )
    expect(res.body).toMatchObject({
      object: 'user',
      email,
      full_name: 'Ada',
      platform_role: 'user',
      is_active: true,
      must_change_password: false,
      created_at: t.clock.now(),
    })
    expect(res.body.id).toMatch(/^user_[0-9A-Za-z]{24}$/)
  })

  test('creates a Personal Org with an owner membership', async () => {
    const u = await makeUser(t, { full_name: 'Grace' })
    const me = await t.req('GET', '/v1/auth/me', { token: u.token })
    expect(me.body.memberships).toEqual([
      { org_id: u.personalOrgId, org_name: "Grace's Personal Org", role: 'owner', personal: true },
    ])
  })

  test('stores the password as an argon2id hash, never in clear', async () => {
    const u = await makeUser(t)
    const row = (await t.deps.store.accounts.findUserById(u.id))!
    expect(row.password_hash).toStartWith('$argon2id$')
    expect(row.password_hash).not.toContain(u.password)
  })

  test('an email registered twice (any case) is a 409 email_taken', async () => {
    const u = await makeUser(t)
    const res = await signup({ email: u.email.toUpperCase(), password: newPassword(), full_name: 'Dup' })
    expect(res.status).toBe(409)
    expect(res.body.error).toEqual({
      message: expect.any(String),
      type: 'conflict_error',
      code: 'email_taken',
      param: 'email',
    })
  })

  for (const field of ['platform_role', 'is_active', 'must_change_password', 'id', 'api_key']) {
    test(`mass assignment of ${field} is rejected and nothing is stored`, async () => {
      const email = uniqueEmail()
      const value =
        field === 'platform_role'
          ? 'superadmin'
          : field === 'is_active'
            ? false
            : field === 'id'
              ? 'user_x'
              : true
      const res = await signup({ email, password: newPassword(), full_name: 'Mallory', [field]: value })
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({
        type: 'invalid_request_error',
        code: 'unknown_field',
        param: field,
      })
      expect(await t.deps.store.accounts.findUserByEmail(email)).toBeUndefined()
    })
  }

  test.each([
    ['short password', { password: 'short' }, 'weak_password', 'password'],
    ['257-char password', { password: 'x'.repeat(257) }, 'weak_password', 'password'],
    ['not an email', { email: 'not-an-email' }, 'invalid_email', 'email'],
    ['blank name', { full_name: '   ' }, 'invalid_value', 'full_name'],
    ['missing name', { full_name: undefined }, 'missing_field', 'full_name'],
    ['numeric email', { email: 42 }, 'invalid_value', 'email'],
  ])('%s → 400 %s', async (_name, patch, code, param) => {
    const body: Record<string, unknown> = {
      email: uniqueEmail(),
      password: newPassword(),
      full_name: 'X',
      ...patch,
    }
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k]
    const res = await signup(body)
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code, param })
  })

  test('SIGNUP_ENABLED=false answers 403 signup_disabled', async () => {
    const closed = makeTestApp({ SIGNUP_ENABLED: 'false' })
    const res = await closed.req('POST', '/v1/auth/signup', {
      body: { email: uniqueEmail(), password: newPassword(), full_name: 'X' },
    })
    expect(res.status).toBe(403)
    expect(res.body.error.code).toBe('signup_disabled')
    closed.close()
  })
})

describe('POST /v1/auth/login', () => {
  test('returns a JWT, its lifetime, the role, the gate flag and the user', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', '/v1/auth/login', {
      body: { email: u.email.toUpperCase(), password: u.password },
    })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({
      token_type: 'bearer',
      expires_in: 86400,
      platform_role: 'user',
      must_change_password: false,
      user: { id: u.id, email: u.email },
    })
    const [, payload] = res.body.access_token.split('.')
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString())
    expect(claims).toMatchObject({ sub: u.id, tv: 0, exp: t.clock.now() + 86400 })
  })

  test('wrong password and unknown email give the same 401', async () => {
    const u = await makeUser(t)
    const wrong = await t.req('POST', '/v1/auth/login', {
      body: { email: u.email, password: 'wrong-password' },
    })
    const unknown = await t.req('POST', '/v1/auth/login', {
      body: { email: uniqueEmail(), password: 'wrong-password' },
    })
    expect(wrong.status).toBe(401)
    expect(unknown.status).toBe(401)
    expect(wrong.body).toEqual(unknown.body)
    expect(wrong.body.error.code).toBe('invalid_credentials')
  })

  test('an unknown email still spends one argon2 verification, like a wrong password does', async () => {
    const u = await makeUser(t)
    const real = t.deps.passwords
    let verifications = 0
    const countVerify = async (pw: string, hash: string) => {
      verifications++
      return real.verify(pw, hash)
    }
    t.deps.passwords = {
      ...real,
      verify: countVerify,
      burn: async (pw) => void (await countVerify(pw, await real.hash('x-timing-dummy'))),
    }
    try {
      await t.req('POST', '/v1/auth/login', { body: { email: uniqueEmail(), password: 'wrong-password' } })
      expect(verifications).toBe(1)
      await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: 'wrong-password' } })
      expect(verifications).toBe(2)
    } finally {
      t.deps.passwords = real
    }
  })

  test('a deactivated user cannot log in, and their JWT stops working', async () => {
    const u = await makeUser(t)
    await setUserFlags(t, u.id, { is_active: false })
    expect(
      (await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })).status,
    ).toBe(403)
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(401)
  })

  test('is rate limited per email and IP with 429 and Retry-After', async () => {
    const u = await makeUser(t)
    for (let i = 0; i < 2; i++)
      await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: 'nope-nope' } })
    const limited = await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
    expect(limited.status).toBe(429)
    expect(limited.body.error.type).toBe('rate_limit_error')
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0)
    // Another email from the same place is not affected.
    const other = await makeUser(t)
    expect(other.token).toBeString()
    t.clock.advance(61)
    expect(
      (await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })).status,
    ).toBe(200)
  })

  test('a JWT expires after JWT_TTL_SECONDS', async () => {
    const u = await makeUser(t)
    t.clock.advance(86400 - 1)
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(200)
    t.clock.advance(2)
    const res = await t.req('GET', '/v1/auth/me', { token: u.token })
    expect(res.status).toBe(401)
  })
})

describe('GET /v1/auth/me', () => {
  test('returns the profile with memberships of team orgs too', async () => {
    const u = await makeUser(t)
    const team = await t.req('POST', '/v1/orgs', { token: u.token, body: { name: 'Lab' } })
    const me = await t.req('GET', '/v1/auth/me', { token: u.token })
    expect(me.status).toBe(200)
    expect(me.body).toMatchObject({ id: u.id, object: 'user', email: u.email })
    expect(me.body.password_hash).toBeUndefined()
    expect(me.body.memberships).toContainEqual({
      org_id: team.body.id,
      org_name: 'Lab',
      role: 'owner',
      personal: false,
    })
  })
})

describe('POST /v1/auth/change-password', () => {
  test('changes the password, returns a fresh JWT and retires older ones', async () => {
    const u = await makeUser(t)
    const next = newPassword()
    const res = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: u.password, new_password: next },
    })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ status: 'password_changed', expires_in: 86400 })
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).body.error.code).toBe('token_revoked')
    expect((await t.req('GET', '/v1/auth/me', { token: res.body.access_token })).status).toBe(200)
    expect(
      (await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })).status,
    ).toBe(401)
    await loginAs(t, u.email, next)
  })

  test('a wrong current password is a 400 and changes nothing', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: 'not-my-password', new_password: newPassword() },
    })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'invalid_current_password', param: 'current_password' })
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(200)
  })

  test('a weak new password is a 400 weak_password', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: u.password, new_password: 'short' },
    })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'weak_password', param: 'new_password' })
  })
})

describe('must_change_password gate', () => {
  test('only /me and change-password are open until the password changes', async () => {
    const u = await makeUser(t)
    await setUserFlags(t, u.id, { must_change_password: true })
    const login = await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
    expect(login.body.must_change_password).toBe(true)
    const token = login.body.access_token
    expect((await t.req('GET', '/v1/auth/me', { token })).status).toBe(200)
    for (const [method, path] of [
      ['GET', '/v1/orgs'],
      ['GET', '/v1/users/me/api-keys'],
      ['POST', '/v1/auth/api-keys/regenerate'],
    ]) {
      const res = await t.req(method!, path!, { token })
      expect(res.status).toBe(403)
      expect(res.body.error).toMatchObject({ type: 'permission_error', code: 'password_change_required' })
    }
    const changed = await t.req('POST', '/v1/auth/change-password', {
      token,
      body: { current_password: u.password, new_password: newPassword() },
    })
    expect(changed.status).toBe(200)
    const fresh = changed.body.access_token
    expect((await t.req('GET', '/v1/orgs', { token: fresh })).status).toBe(200)
    expect((await t.req('GET', '/v1/auth/me', { token: fresh })).body.must_change_password).toBe(false)
  })
})

describe('first start', () => {
  test('creates the superadmin from ADMIN_EMAIL/ADMIN_PASSWORD with must_change_password, once', async () => {
    const fresh = makeTestApp({ ADMIN_EMAIL: 'Root@Lab.test', ADMIN_PASSWORD: 'initial-password' })
    const printed: string[] = []
    const created = await ensureSuperadmin(fresh.deps, (l) => printed.push(l))
    expect(created).toMatchObject({
      email: 'root@lab.test',
      platform_role: 'superadmin',
      must_change_password: true,
    })
    expect(printed).toEqual([]) // a configured password is never printed
    expect(await ensureSuperadmin(fresh.deps, (l) => printed.push(l))).toBeNull()
    const login = await fresh.req('POST', '/v1/auth/login', {
      body: { email: 'root@lab.test', password: 'initial-password' },
    })
    expect(login.body).toMatchObject({ platform_role: 'superadmin', must_change_password: true })
    const { db, tables } = rowsOf(fresh.deps)
    const org = await db.select().from(tables.organizations)
    expect(org).toHaveLength(1)
    fresh.close()
  })

  test('without ADMIN_PASSWORD a password is generated and printed exactly once', async () => {
    const fresh = makeTestApp({ ADMIN_PASSWORD: '' })
    const printed: string[] = []
    await ensureSuperadmin(fresh.deps, (l) => printed.push(l))
    await ensureSuperadmin(fresh.deps, (l) => printed.push(l))
    expect(printed).toHaveLength(1)
    const password = /password: (\S+)/.exec(printed[0]!)![1]!
    const login = await fresh.req('POST', '/v1/auth/login', { body: { email: 'admin@localhost', password } })
    expect(login.status).toBe(200)
    expect(login.body.must_change_password).toBe(true)
    fresh.close()
  })

  test('a superadmin who changed the password reaches the admin endpoints', async () => {
    const a = await makeSuperadmin(t)
    expect((await t.req('GET', '/v1/admin/users', { token: a.token })).status).toBe(200)
  })
})
