import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makeSuperadmin, makeUser, newPassword, uniqueEmail } from '../helpers/builders'
import { rememberSecret } from '../helpers/secrets'

// docs/api.md §2: a new password is 8 to 256 characters, else 400 `weak_password` — whatever its length,
// on every route that sets one (signup, admin create user, change-password, reset-password).

const t = makeTestApp({ RATE_LIMIT_FORGOT_PER_HOUR: '0' })
afterAll(() => t.close())

const LENGTHS = [7, 257, 4097, 10_000, 1_000_000]
const tooLong = (n: number) => 'p'.repeat(n)

const hashOf = async (id: string) => (await t.deps.store.accounts.findUserById(id))!.password_hash

describe('a new password outside 8–256 characters is 400 weak_password', () => {
  test.each(LENGTHS)('%d characters at signup', async (n) => {
    const email = uniqueEmail()
    const res = await t.req('POST', '/v1/auth/signup', {
      body: { email, password: tooLong(n), full_name: 'X' },
    })
    expect([res.status, res.body.error]).toEqual([
      400,
      expect.objectContaining({ code: 'weak_password', param: 'password' }),
    ])
    expect(await t.deps.store.accounts.findUserByEmail(email)).toBeUndefined()
  })

  test.each(LENGTHS)('%d characters when a superadmin creates a user', async (n) => {
    const sa = await makeSuperadmin(t)
    const email = uniqueEmail()
    const res = await t.req('POST', '/v1/admin/users', {
      token: sa.token,
      body: { email, full_name: 'X', password: tooLong(n) },
    })
    expect([res.status, res.body.error]).toEqual([
      400,
      expect.objectContaining({ code: 'weak_password', param: 'password' }),
    ])
    expect(await t.deps.store.accounts.findUserByEmail(email)).toBeUndefined()
  })

  test.each(LENGTHS)('%d characters at change-password', async (n) => {
    const u = await makeUser(t)
    const before = await hashOf(u.id)
    const res = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: u.password, new_password: tooLong(n) },
    })
    expect([res.status, res.body.error]).toEqual([
      400,
      expect.objectContaining({ code: 'weak_password', param: 'new_password' }),
    ])
    expect(await hashOf(u.id)).toBe(before)
  })

  test.each(LENGTHS)('%d characters at reset-password, and the token stays usable', async (n) => {
    const u = await makeUser(t)
    await t.req('POST', '/v1/auth/forgot-password', { body: { email: u.email } })
    const mail = t.mail.sent.filter((m) => m.to === u.email).at(-1)!
    const token = /token=([\w-]+)/.exec(mail.text)![1]!
    rememberSecret(token)
    const before = await hashOf(u.id)
    const res = await t.req('POST', '/v1/auth/reset-password', { body: { token, new_password: tooLong(n) } })
    expect([res.status, res.body.error]).toEqual([
      400,
      expect.objectContaining({ code: 'weak_password', param: 'new_password' }),
    ])
    expect(await hashOf(u.id)).toBe(before)
    const ok = await t.req('POST', '/v1/auth/reset-password', {
      body: { token, new_password: newPassword() },
    })
    expect(ok.status).toBe(200)
  })
})

test('8 and 256 characters are accepted', async () => {
  for (const n of [8, 256]) {
    const password = tooLong(n)
    const res = await t.req('POST', '/v1/auth/signup', {
      body: { email: uniqueEmail(), password, full_name: 'X' },
    })
    expect([n, res.status]).toEqual([n, 200])
  }
})
