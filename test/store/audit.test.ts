import { afterEach, expect, test } from 'bun:test'
import { type AuditContext, type AuditEvent, SYSTEM_AUDIT } from '../../src/domain/audit'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// The audit log behaves the same on SQLite and on PostgreSQL (docs/api.md §12, §17): a change and its
// entries commit together or not at all, the filters, the pages and the expiry.

const ctx = (over: Partial<AuditContext['actor']> = {}): AuditContext => ({
  actor: { kind: 'user', id: 'user_a', user_id: 'user_a', ...over },
  ip: '10.0.0.1',
  user_agent: 'test',
})
const ev = (over: Partial<AuditEvent> = {}): AuditEvent => ({
  action: 'org.created',
  target_id: 'org_1',
  org_id: 'org_1',
  details: {},
  ...over,
})

let n = 0
const newUser = (h: StoreHarness) =>
  h.store.accounts.createUser(
    {
      email: `a${++n}@x.test`,
      password_hash: 'h',
      full_name: 'A',
      platform_role: 'user',
      must_change_password: false,
      now: 1,
    },
    'A org',
    SYSTEM_AUDIT,
  )

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} audit`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('no change without its entry: when the entry cannot be written, the change is rolled back', async () => {
      h = await open()
      const u = await newUser(h)
      const [m] = await h.store.orgs.listMembershipsOf(u.id)
      await h.exec('DROP TABLE audit_events')
      const count = async (table: string) =>
        Number((await h.one<{ n: number }>(`SELECT count(*) AS n FROM ${table}`)).n)
      const before = {
        users: await count('users'),
        keys: await count('api_keys'),
        orgs: await count('organizations'),
      }
      await expect(newUser(h)).rejects.toThrow()
      await expect(
        h.store.keys.createKey(
          { type: 'worker', orgId: m!.org_id },
          {
            name: 'k',
            prefix: 'gk-x',
            key_hash: 'hash-x',
            created_by: u.id,
            created_at: 2,
            expires_at: null,
          },
          SYSTEM_AUDIT,
        ),
      ).rejects.toThrow()
      await expect(h.store.orgs.createTeamOrg('Lab', u.id, 3, SYSTEM_AUDIT)).rejects.toThrow()
      await expect(h.store.accounts.setPassword(u.id, 'new-hash', 4, SYSTEM_AUDIT)).rejects.toThrow()
      await expect(h.store.accounts.updateUser(u.id, { is_active: false }, 5, SYSTEM_AUDIT)).rejects.toThrow()
      expect({
        users: await count('users'),
        keys: await count('api_keys'),
        orgs: await count('organizations'),
      }).toEqual(before)
      const row = (await h.store.accounts.findUserById(u.id))!
      expect(row).toMatchObject({ password_hash: 'h', is_active: true, token_version: 0 })
    })

    test('an entry naming a secret is refused, and nothing is written', async () => {
      h = await open()
      await expect(
        h.store.audit.record(ctx(), [ev(), ev({ details: { nested: [{ api_key_hash: 'x' }] } })], 10),
      ).rejects.toThrow(/names a secret/)
      expect((await h.store.audit.page({}, {})).rows).toEqual([])
    })

    test('filters: actor, actions, target, org, the orgs one may read, time; details kept as given', async () => {
      h = await open()
      await h.store.audit.record(ctx(), [ev({ details: { a: [1, { b: null }], s: 'x' } })], 10)
      await h.store.audit.record(
        ctx({ kind: 'personal_key', id: 'key_k', user_id: 'user_a' }),
        [ev({ action: 'key.personal.created', target_id: 'key_k', org_id: null })],
        20,
      )
      await h.store.audit.record(
        SYSTEM_AUDIT,
        [ev({ action: 'catalogue.seeded', target_id: null, org_id: null })],
        30,
      )
      await h.store.audit.record(
        ctx({ id: 'user_b', user_id: 'user_b' }),
        [ev({ target_id: 'org_2', org_id: 'org_2' })],
        40,
      )
      const actions = async (filter: Parameters<typeof h.store.audit.page>[0]) =>
        (await h.store.audit.page(filter, {})).rows.map((r) => `${r.action}@${r.created_at}`)

      expect(await actions({})).toEqual([
        'org.created@40',
        'catalogue.seeded@30',
        'key.personal.created@20',
        'org.created@10',
      ])
      expect(await actions({ actor: { by: 'user', id: 'user_a' } })).toEqual([
        'key.personal.created@20',
        'org.created@10',
      ])
      expect(await actions({ actor: { by: 'key', id: 'key_k' } })).toEqual(['key.personal.created@20'])
      expect(await actions({ actor: { by: 'kind', kind: 'system' } })).toEqual(['catalogue.seeded@30'])
      expect(await actions({ actions: ['catalogue.seeded', 'key.personal.created'] })).toEqual([
        'catalogue.seeded@30',
        'key.personal.created@20',
      ])
      expect(await actions({ target_kind: 'org', target_id: 'org_1' })).toEqual(['org.created@10'])
      expect(await actions({ org_id: 'org_2' })).toEqual(['org.created@40'])
      expect(await actions({ visible_orgs: ['org_1', 'org_2'] })).toEqual([
        'org.created@40',
        'org.created@10',
      ])
      expect(await actions({ visible_orgs: [] })).toEqual([])
      expect(await actions({ start: 20, end: 40 })).toEqual([
        'catalogue.seeded@30',
        'key.personal.created@20',
      ])

      const [first] = (await h.store.audit.page({ org_id: 'org_1' }, {})).rows
      expect(first).toMatchObject({
        actor_kind: 'user',
        actor_id: 'user_a',
        actor_user_id: 'user_a',
        ip: '10.0.0.1',
        user_agent: 'test',
        target_kind: 'org',
        details: { a: [1, { b: null }], s: 'x' },
      })
    })

    test('pages within the filter; a cursor outside it is refused', async () => {
      h = await open()
      for (let i = 0; i < 5; i++)
        await h.store.audit.record(
          ctx(),
          [ev({ org_id: i % 2 ? 'org_odd' : 'org_even', target_id: `t${i}` })],
          i,
        )
      const p1 = await h.store.audit.page({ org_id: 'org_even' }, { limit: 2 })
      expect(p1.rows.map((r) => r.target_id)).toEqual(['t4', 't2'])
      expect(p1.has_more).toBe(true)
      const p2 = await h.store.audit.page({ org_id: 'org_even' }, { limit: 2, after: p1.rows[1]!.id })
      expect(p2.rows.map((r) => r.target_id)).toEqual(['t0'])
      expect(p2.has_more).toBe(false)
      const odd = (await h.store.audit.page({ org_id: 'org_odd' }, {})).rows[0]!
      await expect(h.store.audit.page({ org_id: 'org_even' }, { after: odd.id })).rejects.toMatchObject({
        status: 400,
        errorCode: 'invalid_cursor',
      })
    })

    test('expire: the oldest entries before the bound, a chunk at a time, each recorded by one entry', async () => {
      h = await open()
      for (const at of [5, 1, 3, 9, 2]) await h.store.audit.record(ctx(), [ev({ target_id: `t${at}` })], at)
      expect(await h.store.audit.expire(6, 2, 100, SYSTEM_AUDIT)).toBe(2)
      const left = async () =>
        (await h.store.audit.page({ actions: ['org.created'] }, {})).rows.map((r) => r.target_id)
      expect((await left()).sort()).toEqual(['t3', 't5', 't9'])
      expect(await h.store.audit.expire(6, 10, 100, SYSTEM_AUDIT)).toBe(2)
      expect(await left()).toEqual(['t9'])
      expect(await h.store.audit.expire(6, 10, 100, SYSTEM_AUDIT)).toBe(0)
      const recorded = (await h.store.audit.page({ actions: ['audit.expired'] }, {})).rows
      expect(recorded.map((r) => [r.actor_kind, r.created_at, r.details])).toEqual([
        ['system', 100, { count: 2, before: 6 }],
        ['system', 100, { count: 2, before: 6 }],
      ])
    })
  })
}
