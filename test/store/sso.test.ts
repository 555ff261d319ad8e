import { afterEach, expect, test } from 'bun:test'
import type { Store } from '../../src/store'
import type { NewSsoLogin } from '../../src/store/sso'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// Single sign-on's store behaves the same on SQLite and PostgreSQL (docs/api.md §2 "Single sign-on",
// §12): a state and a one-time code are claimed once even by callers racing on several instances,
// and an identity joins one account, an account one identity per issuer.

const ISSUER = 'https://idp.example.test/realms/lab'
let n = 0
const newUser = (store: Store, identity?: { issuer: string; subject: string }) =>
  store.accounts.createUser(
    {
      email: `sso${++n}@lab.example`,
      password_hash: '',
      full_name: 'Grace',
      platform_role: 'user',
      must_change_password: false,
      now: 10,
    },
    "Grace's Personal Org",
    identity && { ...identity, email: null },
  )

const login = (over: Partial<NewSsoLogin> = {}): NewSsoLogin => ({
  state_hash: `state-${++n}`,
  nonce: 'nonce',
  code_verifier: 'verifier',
  return_to: '/app/batches',
  redirect_uri: null,
  client_state: null,
  code_challenge: null,
  created_at: 100,
  expires_at: 700,
  ...over,
})

const settled = async <T>(ps: Promise<T>[]) => {
  const all = await Promise.allSettled(ps)
  return {
    ok: all.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<T>).value),
    errors: all.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason),
  }
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} single sign-on`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('a state is claimed once, by one of many racing callers, and only while unexpired', async () => {
      h = await open()
      const started = login()
      await h.store.sso.startLogin(started)
      const claims = await Promise.all(
        Array.from({ length: 8 }, () => h.store.sso.takeLogin(started.state_hash, 200)),
      )
      expect(claims.filter(Boolean)).toHaveLength(1)
      expect(claims.find(Boolean)).toMatchObject({ nonce: 'nonce', state_used_at: 200 })
      const late = login()
      await h.store.sso.startLogin(late)
      expect(await h.store.sso.takeLogin(late.state_hash, 700)).toBeUndefined()
      expect(await h.store.sso.takeLogin('unknown', 200)).toBeUndefined()
    })

    test('a one-time code is redeemed once, while unexpired; long-expired sign-ins are cleared by the next start', async () => {
      h = await open()
      const user = await newUser(h.store)
      const started = login()
      await h.store.sso.startLogin(started)
      await h.store.sso.takeLogin(started.state_hash, 200)
      await h.store.sso.grantCode(started.state_hash, 'code-hash', user.id, 260)
      const redeemed = await Promise.all(
        Array.from({ length: 8 }, () => h.store.sso.redeemCode('code-hash', 230)),
      )
      expect(redeemed.filter(Boolean)).toHaveLength(1)
      expect(redeemed.find(Boolean)?.user_id).toBe(user.id)

      const other = login()
      await h.store.sso.startLogin(other)
      await h.store.sso.takeLogin(other.state_hash, 200)
      await h.store.sso.grantCode(other.state_hash, 'other-code', user.id, 260)
      expect(await h.store.sso.redeemCode('other-code', 260)).toBeUndefined()

      // An hour past their expiry (700), sign-ins are deleted when another starts.
      await h.store.sso.startLogin(login({ created_at: 700 + 3601, expires_at: 700 + 4201 }))
      expect((await h.one<{ n: number }>('SELECT COUNT(*) AS n FROM sso_logins')).n).toEqual(
        kind === 'postgres' ? ('1' as never) : 1,
      )
    })

    test('an identity joins one account, and an account has one identity per issuer', async () => {
      h = await open()
      const a = await newUser(h.store, { issuer: ISSUER, subject: 'alice' })
      expect((await h.store.sso.findLinkedUser(ISSUER, 'alice'))?.id).toBe(a.id)
      // The same identity again, on a new account or an existing one: 409, and nothing made.
      await expect(newUser(h.store, { issuer: ISSUER, subject: 'alice' })).rejects.toMatchObject({
        status: 409,
        errorCode: 'identity_conflict',
      })
      const b = await newUser(h.store)
      await expect(
        h.store.sso.link(b.id, { issuer: ISSUER, subject: 'alice', email: null }, 20),
      ).rejects.toMatchObject({
        errorCode: 'identity_conflict',
      })
      await expect(
        h.store.sso.link(a.id, { issuer: ISSUER, subject: 'alice-2', email: null }, 20),
      ).rejects.toMatchObject({
        errorCode: 'identity_conflict',
      })
      // Another issuer is another slot.
      const linked = await h.store.sso.link(
        a.id,
        { issuer: 'https://other.example.test', subject: 'alice', email: null },
        20,
      )
      expect(linked.id).toBe(a.id)
      // Two links of one identity racing: one wins.
      const c = await newUser(h.store)
      const d = await newUser(h.store)
      const race = await settled(
        [c, d].map((u) => h.store.sso.link(u.id, { issuer: ISSUER, subject: 'raced', email: null }, 30)),
      )
      expect(race.ok).toHaveLength(1)
      expect(race.errors.map((e) => e.errorCode)).toEqual(['identity_conflict'])
    })

    test('recordSignIn sets the role the groups decide; hasLinkedSuperadmin sees an active linked superadmin', async () => {
      h = await open()
      const a = await newUser(h.store, { issuer: ISSUER, subject: 'ada' })
      expect(await h.store.sso.hasLinkedSuperadmin(ISSUER)).toBe(false)
      const promoted = await h.store.sso.recordSignIn(ISSUER, 'ada', 50, 'superadmin')
      expect(promoted).toMatchObject({ id: a.id, platform_role: 'superadmin' })
      expect(await h.store.sso.hasLinkedSuperadmin(ISSUER)).toBe(true)
      expect(await h.store.sso.hasLinkedSuperadmin('https://other.example.test')).toBe(false)
      expect((await h.store.sso.recordSignIn(ISSUER, 'ada', 60))?.platform_role).toBe('superadmin')
      await h.store.accounts.updateUser(a.id, { is_active: false }, 70).catch(() => {})
      expect(await h.store.sso.recordSignIn(ISSUER, 'nobody', 60)).toBeUndefined()
      const demoted = await h.store.sso.recordSignIn(ISSUER, 'ada', 80, 'user')
      expect(demoted?.platform_role).toBe('user')
      expect(await h.store.sso.hasLinkedSuperadmin(ISSUER)).toBe(false)
    })
  })
}
