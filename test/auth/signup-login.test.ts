import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makeUser, newPassword, uniqueEmail } from '../helpers/builders'

const t = makeTestApp()
afterAll(() => t.close())

describe('POST /v1/auth/signup', () => {
  test('creates the user and returns exactly the SPEC fields, no key', async () => {
    const email = uniqueEmail()
    const res = await t.req('POST', '/v1/auth/signup', {
      body: { email: `  ${email.toUpperCase()} `, password: newPassword(), full_name: 'Ada' },
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
      email,
      full_name: 'Ada',
      platform_role: 'user',
      is_active: true,
      must_change_password: false,
    })
    expect(res.body.id).toMatch(/^user_[0-9A-Za-z]{24}$/)
    expect(res.body.created_at).toBe(t.clock.now())
  })
})

describe('POST /v1/auth/login', () => {
  test('returns a JWT with role and gate flag', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({
      token_type: 'bearer',
      expires_in: 86400,
      platform_role: 'user',
      must_change_password: false,
    })
    expect(res.body.access_token.split('.')).toHaveLength(3)
  })
})
