import { afterEach, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import type { Store } from '../../src/store'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// Users and reset tokens behave the same on SQLite and on PostgreSQL (docs/api.md §12), including the
// races several instances sharing one PostgreSQL database can run.

let n = 0
const newUser = (store: Store, over: { email?: string; superadmin?: boolean; now?: number } = {}) =>
  store.accounts.createUser(
    {
      email: over.email ?? `u${++n}@x.test`,
      password_hash: 'hash-0',
      full_name: 'Ada',
      platform_role: over.superadmin ? 'superadmin' : 'user',
      must_change_password: false,
      now: over.now ?? 10,
    },
    "Ada's Personal Org",
    SYSTEM_AUDIT,
  )

const settled = async <T>(ps: Promise<T>[]) => {
  const all = await Promise.allSettled(ps)
  return {
    ok: all.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<T>).value),
    errors: all.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason),
  }
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} accounts`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('createUser: the user, a Personal Org and its owner membership; a taken email is 409 email_taken', async () => {
      h = await open()
      const u = await newUser(h.store, { email: 'ada@x.test', now: 42 })
      expect(u).toMatchObject({
        email: 'ada@x.test',
        full_name: 'Ada',
        platform_role: 'user',
        is_active: true,
        must_change_password: false,
        token_version: 0,
        created_at: 42,
        updated_at: 42,
      })
      expect(u.id).toStartWith('user_')
      expect(await h.store.orgs.listMembershipsOf(u.id)).toEqual([
        {
          org_id: expect.stringMatching(/^org_/),
          org_name: "Ada's Personal Org",
          role: 'owner',
          personal: true,
        },
      ])
      await expect(newUser(h.store, { email: 'ada@x.test' })).rejects.toMatchObject({
        status: 409,
        errorCode: 'email_taken',
        param: 'email',
      })
      // The failed signup left nothing behind.
      expect(Number((await h.one<{ n: number }>('SELECT count(*) AS n FROM organizations')).n)).toBe(1)
    })

    test('createUser: concurrent signups of one email make one user, the others get 409', async () => {
      h = await open()
      const { ok, errors } = await settled(
        Array.from({ length: 6 }, () => newUser(h.store, { email: 'race@x.test' })),
      )
      expect(ok.length).toBe(1)
      expect(errors.map((e) => e.errorCode)).toEqual(Array(5).fill('email_taken'))
      const counts = await h.one<{ u: number; o: number; m: number }>(
        'SELECT (SELECT count(*) FROM users) AS u, (SELECT count(*) FROM organizations) AS o, (SELECT count(*) FROM memberships) AS m',
      )
      expect([counts.u, counts.o, counts.m].map(Number)).toEqual([1, 1, 1])
    })

    test('findUserById, findUserByEmail, hasSuperadmin', async () => {
      h = await open()
      expect(await h.store.accounts.hasSuperadmin()).toBe(false)
      const u = await newUser(h.store, { email: 'find@x.test' })
      expect(await h.store.accounts.findUserById(u.id)).toEqual(u)
      expect(await h.store.accounts.findUserByEmail('find@x.test')).toEqual(u)
      expect(await h.store.accounts.findUserById('user_nope')).toBeUndefined()
      expect(await h.store.accounts.findUserByEmail('nope@x.test')).toBeUndefined()
      expect(await h.store.accounts.hasSuperadmin()).toBe(false)
      await newUser(h.store, { superadmin: true })
      expect(await h.store.accounts.hasSuperadmin()).toBe(true)
    })

    test('listUsers: newest first, limit and cursor (docs/api.md §0)', async () => {
      h = await open()
      const ids = []
      for (let i = 0; i < 3; i++) ids.push((await newUser(h.store)).id)
      const first = await h.store.accounts.listUsers({ limit: '2' })
      expect(first.rows.map((u) => u.id)).toEqual([ids[2], ids[1]])
      expect(first.has_more).toBe(true)
      const rest = await h.store.accounts.listUsers({ limit: '2', after: ids[1] })
      expect(rest.rows.map((u) => u.id)).toEqual([ids[0]])
      expect(rest.has_more).toBe(false)
      await expect(h.store.accounts.listUsers({ after: 'user_nope' })).rejects.toMatchObject({
        status: 400,
        errorCode: 'invalid_cursor',
      })
      await expect(h.store.accounts.listUsers({ limit: '0' })).rejects.toMatchObject({ status: 400 })
    })

    test('updateUser: applies the changes; unknown user; the last active superadmin stays', async () => {
      h = await open()
      const admin = await newUser(h.store, { superadmin: true })
      const u = await newUser(h.store)
      expect(
        await h.store.accounts.updateUser('user_nope', { is_active: false }, 50, SYSTEM_AUDIT),
      ).toBeUndefined()
      expect(
        await h.store.accounts.updateUser(
          u.id,
          { is_active: false, must_change_password: true },
          50,
          SYSTEM_AUDIT,
        ),
      ).toMatchObject({ id: u.id, is_active: false, must_change_password: true, updated_at: 50 })
      for (const changes of [{ platform_role: 'user' as const }, { is_active: false }]) {
        await expect(h.store.accounts.updateUser(admin.id, changes, 60, SYSTEM_AUDIT)).rejects.toMatchObject({
          status: 400,
          errorCode: 'last_superadmin',
        })
      }
      // Promoting another lets the first step down.
      await h.store.accounts.updateUser(
        u.id,
        { platform_role: 'superadmin', is_active: true },
        70,
        SYSTEM_AUDIT,
      )
      expect(
        await h.store.accounts.updateUser(admin.id, { platform_role: 'user' }, 80, SYSTEM_AUDIT),
      ).toMatchObject({
        platform_role: 'user',
      })
    })

    test('updateUser: two superadmins demoting each other at once leave one active superadmin', async () => {
      h = await open()
      for (let round = 0; round < 5; round++) {
        await h.exec("UPDATE users SET platform_role = 'user'")
        const a = await newUser(h.store, { superadmin: true })
        const b = await newUser(h.store, { superadmin: true })
        const { ok, errors } = await settled([
          h.store.accounts.updateUser(a.id, { platform_role: 'user' }, 90, SYSTEM_AUDIT),
          h.store.accounts.updateUser(b.id, { is_active: false }, 90, SYSTEM_AUDIT),
        ])
        expect(ok.length).toBe(1)
        expect(errors.map((e) => e.errorCode)).toEqual(['last_superadmin'])
        const left = await h.one<{ n: number }>(
          "SELECT count(*) AS n FROM users WHERE platform_role = 'superadmin' AND is_active = TRUE",
        )
        expect(Number(left.n)).toBe(1)
      }
    })

    test('setPassword: new hash, gate cleared, token version bumped', async () => {
      h = await open()
      const u = await newUser(h.store)
      await h.store.accounts.updateUser(u.id, { must_change_password: true }, 20, SYSTEM_AUDIT)
      const after = await h.store.accounts.setPassword(u.id, 'hash-1', 30, SYSTEM_AUDIT)
      expect(after).toMatchObject({
        password_hash: 'hash-1',
        must_change_password: false,
        token_version: 1,
        updated_at: 30,
      })
      expect((await h.store.accounts.setPassword(u.id, 'hash-2', 31, SYSTEM_AUDIT))?.token_version).toBe(2)
    })

    test('reset tokens: single use, unexpired, for an active user; the password set with the claim', async () => {
      h = await open()
      const u = await newUser(h.store)
      const token = (hash: string, expires_at = 1000) =>
        h.store.accounts.addResetToken({ user_id: u.id, token_hash: hash, created_at: 10, expires_at })
      await token('t-good')
      await token('t-old', 100)
      expect(
        await h.store.accounts.redeemResetToken('t-unknown', 'hash-r', 200, SYSTEM_AUDIT),
      ).toBeUndefined()
      expect(await h.store.accounts.redeemResetToken('t-old', 'hash-r', 200, SYSTEM_AUDIT)).toBeUndefined()
      // A deactivated user's token does nothing and stays unused.
      await h.store.accounts.updateUser(u.id, { is_active: false }, 200, SYSTEM_AUDIT)
      expect(await h.store.accounts.redeemResetToken('t-good', 'hash-r', 200, SYSTEM_AUDIT)).toBeUndefined()
      expect(await h.one(`SELECT used_at FROM password_reset_tokens WHERE token_hash = 't-good'`)).toEqual({
        used_at: null,
      })
      await h.store.accounts.updateUser(
        u.id,
        { is_active: true, must_change_password: true },
        200,
        SYSTEM_AUDIT,
      )
      expect(await h.store.accounts.redeemResetToken('t-good', 'hash-r', 300, SYSTEM_AUDIT)).toBe(u.id)
      expect(await h.store.accounts.findUserById(u.id)).toMatchObject({
        password_hash: 'hash-r',
        must_change_password: false,
        token_version: 1,
      })
      expect(await h.store.accounts.redeemResetToken('t-good', 'hash-x', 301, SYSTEM_AUDIT)).toBeUndefined()
      expect((await h.store.accounts.findUserById(u.id))?.password_hash).toBe('hash-r')
    })

    test('reset tokens: concurrent redemptions of one token, one wins', async () => {
      h = await open()
      const u = await newUser(h.store)
      await h.store.accounts.addResetToken({
        user_id: u.id,
        token_hash: 't',
        created_at: 1,
        expires_at: 1000,
      })
      const results = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          h.store.accounts.redeemResetToken('t', `hash-${i}`, 5, SYSTEM_AUDIT),
        ),
      )
      expect(results.filter(Boolean).length).toBe(1)
      expect((await h.store.accounts.findUserById(u.id))?.token_version).toBe(1)
    })
  })
}
