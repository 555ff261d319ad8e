import { afterEach, expect, test } from 'bun:test'
import { type AuditAction, type AuditContext, SYSTEM_AUDIT } from '../../src/domain/audit'
import type { Store } from '../../src/store'
import type { NewSsoLogin } from '../../src/store/sso'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// Single sign-on's store behaves the same on SQLite and PostgreSQL (docs/api.md §2 "Single sign-on",
// §12): a state and a one-time code are claimed once even by callers racing on several instances,
// and an identity joins one account, an account one identity per issuer.

const ISSUER = 'https://idp.example.test/realms/lab'
let n = 0
const newUser = (
  store: Store,
  identity?: { issuer: string; subject: string },
  platform_role: 'user' | 'superadmin' = 'user',
) =>
  store.accounts.createUser(
    {
      email: `sso${++n}@lab.example`,
      password_hash: '',
      full_name: 'Grace',
      platform_role,
      must_change_password: false,
      now: 10,
    },
    "Grace's Personal Org",
    SYSTEM_AUDIT,
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
  browser_hash: `browser-${n}`,
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

    /** `l` started, its state claimed in its browser at 200, and the provider's word for `userId`. */
    const vouched = async (
      l: NewSsoLogin,
      userId: string,
      code: { hash: string; expires_at: number } | null = null,
    ) => {
      await h.store.sso.startLogin(l)
      await h.store.sso.takeLogin(l.state_hash, l.browser_hash, 200)
      await h.store.sso.grantCode(l.state_hash, userId, code)
    }

    test('a state is claimed once, by one of many racing callers, only while unexpired and in its browser', async () => {
      h = await open()
      const started = login()
      await h.store.sso.startLogin(started)
      // Another browser's cookie claims nothing, and spends nothing.
      expect(await h.store.sso.takeLogin(started.state_hash, 'another-browser', 200)).toBeUndefined()
      const claims = await Promise.all(
        Array.from({ length: 8 }, () => h.store.sso.takeLogin(started.state_hash, started.browser_hash, 200)),
      )
      expect(claims.filter(Boolean)).toHaveLength(1)
      expect(claims.find(Boolean)).toMatchObject({ nonce: 'nonce', state_used_at: 200 })
      const late = login()
      await h.store.sso.startLogin(late)
      expect(await h.store.sso.takeLogin(late.state_hash, late.browser_hash, 700)).toBeUndefined()
      expect(await h.store.sso.takeLogin('unknown', started.browser_hash, 200)).toBeUndefined()
    })

    test("a terminal's sign-in waits for its browser's answer: confirmed once (the code set) or cancelled once (deleted)", async () => {
      h = await open()
      const user = await newUser(h.store)
      const terminal = () =>
        login({ return_to: null, redirect_uri: 'http://127.0.0.1:5000/cb', code_challenge: 'c'.repeat(43) })
      const confirmed = terminal()
      await h.store.sso.startLogin(confirmed)
      // Before the provider vouched for anyone, nothing waits.
      expect(
        await h.store.sso.confirmLogin(confirmed.browser_hash, { hash: 'early', expires_at: 260 }, 200),
      ).toBeUndefined()
      await h.store.sso.takeLogin(confirmed.state_hash, confirmed.browser_hash, 200)
      await h.store.sso.grantCode(confirmed.state_hash, user.id, null)
      expect(await h.store.sso.redeemCode('early', 210)).toBeUndefined()
      // Another browser's answer finds nothing.
      expect(
        await h.store.sso.confirmLogin('another-browser', { hash: 'x', expires_at: 260 }, 210),
      ).toBeUndefined()
      expect(await h.store.sso.cancelLogin('another-browser', 210)).toBeUndefined()
      const answers = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          h.store.sso.confirmLogin(confirmed.browser_hash, { hash: `code-${i}`, expires_at: 270 }, 210),
        ),
      )
      expect(answers.filter(Boolean)).toHaveLength(1)
      const won = answers.find(Boolean)!
      expect(won).toMatchObject({ user_id: user.id, redirect_uri: 'http://127.0.0.1:5000/cb' })
      expect(await h.store.sso.cancelLogin(confirmed.browser_hash, 220)).toBeUndefined()
      expect((await h.store.sso.redeemCode(won.code_hash!, 220))?.user_id).toBe(user.id)

      const cancelled = terminal()
      await vouched(cancelled, user.id)
      expect((await h.store.sso.cancelLogin(cancelled.browser_hash, 210))?.redirect_uri).toBe(
        'http://127.0.0.1:5000/cb',
      )
      expect(await h.store.sso.cancelLogin(cancelled.browser_hash, 210)).toBeUndefined()
      expect(
        await h.store.sso.confirmLogin(cancelled.browser_hash, { hash: 'late', expires_at: 270 }, 210),
      ).toBeUndefined()

      // Past the sign-in's ten minutes, nothing waits either.
      const stale = terminal()
      await vouched(stale, user.id)
      expect(
        await h.store.sso.confirmLogin(stale.browser_hash, { hash: 's', expires_at: 760 }, 700),
      ).toBeUndefined()

      // The dashboard's sign-in has its code at once and waits for nothing.
      const dashboard = login()
      await vouched(dashboard, user.id)
      expect(
        await h.store.sso.confirmLogin(dashboard.browser_hash, { hash: 'd', expires_at: 260 }, 210),
      ).toBeUndefined()
    })

    test('a one-time code is redeemed once, while unexpired; long-expired sign-ins are cleared by the next start', async () => {
      h = await open()
      const user = await newUser(h.store)
      const started = login()
      await vouched(started, user.id, { hash: 'code-hash', expires_at: 260 })
      const redeemed = await Promise.all(
        Array.from({ length: 8 }, () => h.store.sso.redeemCode('code-hash', 230)),
      )
      expect(redeemed.filter(Boolean)).toHaveLength(1)
      expect(redeemed.find(Boolean)?.user_id).toBe(user.id)

      const other = login()
      await vouched(other, user.id, { hash: 'other-code', expires_at: 260 })
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
        h.store.sso.link(
          b.id,
          { issuer: ISSUER, subject: 'alice', email: null },
          20,
          undefined,
          SYSTEM_AUDIT,
        ),
      ).rejects.toMatchObject({
        errorCode: 'identity_conflict',
      })
      await expect(
        h.store.sso.link(
          a.id,
          { issuer: ISSUER, subject: 'alice-2', email: null },
          20,
          undefined,
          SYSTEM_AUDIT,
        ),
      ).rejects.toMatchObject({
        errorCode: 'identity_conflict',
      })
      // Another issuer is another slot.
      const linked = await h.store.sso.link(
        a.id,
        { issuer: 'https://other.example.test', subject: 'alice', email: null },
        20,
        undefined,
        SYSTEM_AUDIT,
      )
      expect(linked.id).toBe(a.id)
      // Two links of one identity racing: one wins.
      const c = await newUser(h.store)
      const d = await newUser(h.store)
      const race = await settled(
        [c, d].map((u) =>
          h.store.sso.link(
            u.id,
            { issuer: ISSUER, subject: 'raced', email: null },
            30,
            undefined,
            SYSTEM_AUDIT,
          ),
        ),
      )
      expect(race.ok).toHaveLength(1)
      expect(race.errors.map((e) => e.errorCode)).toEqual(['identity_conflict'])
    })

    test('audit (docs/api.md §17): a link and the role it sets commit with their entries; a refused link writes none', async () => {
      h = await open()
      const request: AuditContext = {
        actor: { kind: 'anonymous', id: null, user_id: null },
        ip: '10.0.0.7',
        user_agent: 'browser',
      }
      const entries = async (action: AuditAction, target: string) =>
        (await h.store.audit.page({ actions: [action], target_id: target }, {})).rows
      const made = await newUser(h.store, { issuer: ISSUER, subject: 'made' })
      expect(await entries('user.created', made.id)).toEqual([
        expect.objectContaining({
          actor_kind: 'system',
          details: { email: made.email, platform_role: 'user', via: 'sso', issuer: ISSUER, subject: 'made' },
        }),
      ])

      // Another superadmin: a's role may be taken away below (never the last one's).
      await newUser(h.store, undefined, 'superadmin')
      const a = await newUser(h.store)
      await h.store.sso.link(
        a.id,
        { issuer: ISSUER, subject: 'joined', email: a.email },
        40,
        'superadmin',
        request,
      )
      expect(await entries('user.identity_linked', a.id)).toEqual([
        expect.objectContaining({
          created_at: 40,
          actor_kind: 'user',
          actor_id: a.id,
          ip: '10.0.0.7',
          details: { issuer: ISSUER, subject: 'joined', email: a.email },
        }),
      ])
      expect(await entries('user.role_changed', a.id)).toEqual([
        expect.objectContaining({
          actor_kind: 'system',
          actor_id: null,
          ip: '10.0.0.7',
          user_agent: 'browser',
          details: { from: 'user', to: 'superadmin', via: 'sso', issuer: ISSUER },
        }),
      ])
      // The same role again writes nothing; the role taken away writes one more.
      await h.store.sso.recordSignIn(ISSUER, 'joined', 50, 'superadmin', request)
      await h.store.sso.recordSignIn(ISSUER, 'joined', 60, undefined, request)
      expect(await entries('user.role_changed', a.id)).toHaveLength(1)
      await h.store.sso.recordSignIn(ISSUER, 'joined', 70, 'user', request)
      expect((await entries('user.role_changed', a.id)).map((r) => r.details)).toEqual([
        { from: 'superadmin', to: 'user', via: 'sso', issuer: ISSUER },
        { from: 'user', to: 'superadmin', via: 'sso', issuer: ISSUER },
      ])

      // A link refused (the identity is taken) changes nothing and writes nothing.
      const b = await newUser(h.store)
      await expect(
        h.store.sso.link(b.id, { issuer: ISSUER, subject: 'joined', email: null }, 80, 'superadmin', request),
      ).rejects.toMatchObject({ errorCode: 'identity_conflict' })
      expect(await entries('user.identity_linked', b.id)).toEqual([])
      expect(await entries('user.role_changed', b.id)).toEqual([])
    })

    test('recordSignIn sets the role the groups decide; linkedSuperadmins sees the active linked superadmins, with their provider emails', async () => {
      h = await open()
      const a = await newUser(h.store, { issuer: ISSUER, subject: 'ada' })
      expect(await h.store.sso.linkedSuperadmins(ISSUER)).toEqual([])
      const promoted = await h.store.sso.recordSignIn(ISSUER, 'ada', 50, 'superadmin', SYSTEM_AUDIT)
      expect(promoted).toMatchObject({ id: a.id, platform_role: 'superadmin' })
      expect(await h.store.sso.linkedSuperadmins(ISSUER)).toEqual([{ user_id: a.id, email: null }])
      expect(await h.store.sso.linkedSuperadmins('https://other.example.test')).toEqual([])
      expect(
        (await h.store.sso.recordSignIn(ISSUER, 'ada', 60, undefined, SYSTEM_AUDIT))?.platform_role,
      ).toBe('superadmin')
      expect(await h.store.sso.recordSignIn(ISSUER, 'nobody', 60, 'user', SYSTEM_AUDIT)).toBeUndefined()
      await newUser(h.store, undefined, 'superadmin')
      const demoted = await h.store.sso.recordSignIn(ISSUER, 'ada', 80, 'user', SYSTEM_AUDIT)
      expect(demoted?.platform_role).toBe('user')
      expect(await h.store.sso.linkedSuperadmins(ISSUER)).toEqual([])
    })

    test('OIDC_ADMIN_GROUPS never demotes the last active superadmin: the role is kept, the refusal recorded', async () => {
      h = await open()
      const request: AuditContext = {
        actor: { kind: 'anonymous', id: null, user_id: null },
        ip: '10.0.0.8',
        user_agent: 'browser',
      }
      const entries = async (action: AuditAction, target: string) =>
        (await h.store.audit.page({ actions: [action], target_id: target }, {})).rows
      const root = await newUser(h.store, { issuer: ISSUER, subject: 'root' }, 'superadmin')
      // An inactive superadmin is no other superadmin.
      const inactive = await newUser(h.store, undefined, 'superadmin')
      await h.store.accounts.updateUser(inactive.id, { is_active: false }, 5, SYSTEM_AUDIT)
      const kept = await h.store.sso.recordSignIn(ISSUER, 'root', 50, 'user', request)
      expect(kept?.platform_role).toBe('superadmin')
      expect(await entries('user.role_changed', root.id)).toEqual([])
      expect(await entries('user.role_change_refused', root.id)).toEqual([
        expect.objectContaining({
          created_at: 50,
          actor_kind: 'system',
          ip: '10.0.0.8',
          details: { from: 'superadmin', to: 'user', via: 'sso', issuer: ISSUER, reason: 'last_superadmin' },
        }),
      ])
      // Linking the last superadmin's account while out of the group: linked, the role kept.
      const joined = await h.store.sso.link(
        root.id,
        { issuer: 'https://other.example.test', subject: 'root', email: null },
        60,
        'user',
        request,
      )
      expect(joined.platform_role).toBe('superadmin')
      expect(await entries('user.role_change_refused', root.id)).toHaveLength(2)

      // Two superadmins demoted at once: one keeps the role.
      const other = await newUser(h.store, { issuer: ISSUER, subject: 'other' }, 'superadmin')
      const both = await Promise.all([
        h.store.sso.recordSignIn(ISSUER, 'root', 70, 'user', request),
        h.store.sso.recordSignIn(ISSUER, 'other', 70, 'user', request),
      ])
      expect(both.map((u) => u?.platform_role).sort()).toEqual(['superadmin', 'user'])
      const left = both.find((u) => u?.platform_role === 'superadmin')!
      expect(left.id === root.id || left.id === other.id).toBe(true)
    })
  })
}
