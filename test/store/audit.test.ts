import { afterEach, expect, test } from 'bun:test'
import { type AuditContext, type AuditEvent, SYSTEM_AUDIT } from '../../src/domain/audit'
import { manifestEntry } from '../helpers/catalogue'
import { describeEngine, lit, type StoreHarness, storeEngines } from '../helpers/stores'

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
const newAccount = () => ({
  email: `a${++n}@x.test`,
  password_hash: 'h',
  full_name: 'A',
  platform_role: 'user' as const,
  must_change_password: false,
  now: 1,
})
const newUser = (h: StoreHarness) => h.store.accounts.createUser(newAccount(), 'A org', SYSTEM_AUDIT)

const ISSUER = 'https://idp.example.test/realms/lab'
const REFUSED = 'audit entry refused by the test'

/** From now on every insert into audit_events fails, and nothing else does. */
async function refuseEntries(h: StoreHarness, kind: string) {
  if (kind === 'sqlite')
    await h.exec(`CREATE TRIGGER refuse_entries BEFORE INSERT ON audit_events
      BEGIN SELECT RAISE(ABORT, '${REFUSED}'); END`)
  else
    await h.exec(`CREATE FUNCTION refuse_entries() RETURNS trigger LANGUAGE plpgsql
        AS $$ BEGIN RAISE EXCEPTION '${REFUSED}'; END $$;
      CREATE TRIGGER refuse_entries BEFORE INSERT ON audit_events
        FOR EACH ROW EXECUTE FUNCTION refuse_entries()`)
}

/** An error's message with its causes' (drizzle wraps the driver's error). */
function whyRefused(e: unknown): string {
  const messages: string[] = []
  for (let at = e; at instanceof Error && messages.length < 5; at = at.cause) messages.push(at.message)
  return messages.join(' <- ') || String(e)
}

/** Every row of every table, each table's rows sorted: what a change that rolled back leaves as it was. */
async function everything(h: StoreHarness, kind: string): Promise<Record<string, string[]>> {
  const tables = await h.all<{ name: string }>(
    kind === 'sqlite'
      ? "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
      : "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
  )
  const out: Record<string, string[]> = {}
  for (const { name } of tables)
    out[name] = (await h.all(`SELECT * FROM "${name}"`))
      .map((row) => JSON.stringify(row, (_, v) => (typeof v === 'bigint' ? String(v) : v)))
      .sort()
  expect(Object.keys(out)).toContain('audit_events')
  return out
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} audit`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('no change without its entry: when its entry cannot be written, every audited change is rolled back', async () => {
      h = await open()
      // The world each change acts on, its entries written as usual.
      const owner = await newUser(h)
      const member = await newUser(h)
      const outsider = await newUser(h)
      await h.store.accounts.createUser({ ...newAccount(), password_hash: '' }, 'Linked org', SYSTEM_AUDIT, {
        issuer: ISSUER,
        subject: 'linked',
        email: null,
      })
      const team = await h.store.orgs.createTeamOrg('Lab', owner.id, 2, SYSTEM_AUDIT)
      const doomed = await h.store.orgs.createTeamOrg('Doomed', owner.id, 2, SYSTEM_AUDIT)
      for (const org of [team, doomed])
        await h.store.orgs.addMember(org.id, member.id, 'viewer', 3, SYSTEM_AUDIT)
      const workers = { type: 'worker', orgId: team.id } as const
      const personal = { type: 'personal', userId: owner.id } as const
      const newKey = (name: string) => ({
        name,
        prefix: `gk-${name}`,
        key_hash: `hash-${name}`,
        created_by: owner.id,
        created_at: 4,
        expires_at: null,
      })
      const workerKey = await h.store.keys.createKey(workers, newKey('fleet'), SYSTEM_AUDIT)
      await h.store.keys.createKey({ type: 'worker', orgId: doomed.id }, newKey('doomed'), SYSTEM_AUDIT)
      const personalKey = await h.store.keys.createKey(personal, newKey('laptop'), SYSTEM_AUDIT)
      await h.exec(`INSERT INTO workers (id, org_id, key_id, name, status, activity, loaded_models, registered_at, last_seen_at)
        VALUES ('wrk_1', ${lit(team.id)}, ${lit(workerKey.id)}, 'gpu-1', 'online', 'idle', '[]', 5, 5)`)
      for (const [id, expires_at] of [
        ['file-kept', null],
        ['file-expired', 6],
      ] as const)
        await h.store.files.insert({
          id,
          user_id: owner.id,
          filename: `${id}.jsonl`,
          purpose: 'batch',
          bytes: 10,
          created_at: 5,
          expires_at,
        })
      await h.store.accounts.addResetToken({
        user_id: owner.id,
        token_hash: 'reset',
        created_at: 5,
        expires_at: 500,
      })
      await h.store.catalogue.upsertEntries([manifestEntry('m-1')], 5, SYSTEM_AUDIT)
      const replacement = { prefix: 'gk-new', key_hash: 'hash-new', created_by: owner.id, created_at: 9 }

      // From here on every entry is refused at the database, and nothing else is.
      await refuseEntries(h, kind)
      const before = await everything(h, kind)
      const changes: [string, () => Promise<unknown>][] = [
        ['accounts.createUser', () => newUser(h)],
        [
          'accounts.createUser (single sign-on)',
          () =>
            h.store.accounts.createUser(newAccount(), 'New org', SYSTEM_AUDIT, {
              issuer: ISSUER,
              subject: 'new',
              email: null,
            }),
        ],
        [
          'accounts.updateUser (role)',
          () => h.store.accounts.updateUser(owner.id, { platform_role: 'superadmin' }, 9, ctx()),
        ],
        [
          'accounts.updateUser (disable)',
          () => h.store.accounts.updateUser(owner.id, { is_active: false }, 9, ctx()),
        ],
        ['accounts.setPassword', () => h.store.accounts.setPassword(owner.id, 'new-hash', 9, ctx())],
        ['accounts.redeemResetToken', () => h.store.accounts.redeemResetToken('reset', 'new-hash', 9, ctx())],
        [
          'sso.link',
          () =>
            h.store.sso.link(
              owner.id,
              { issuer: ISSUER, subject: 'owner', email: owner.email },
              9,
              undefined,
              ctx(),
            ),
        ],
        ['sso.recordSignIn (role)', () => h.store.sso.recordSignIn(ISSUER, 'linked', 9, 'superadmin', ctx())],
        ['keys.createKey (personal)', () => h.store.keys.createKey(personal, newKey('second'), ctx())],
        ['keys.createKey (worker)', () => h.store.keys.createKey(workers, newKey('second'), ctx())],
        [
          'keys.updateKey (rename, expiry)',
          () => h.store.keys.updateKey(personal, personalKey.id, { name: 'desk', expires_at: 900 }, 9, ctx()),
        ],
        [
          'keys.updateKey (revoke)',
          () => h.store.keys.updateKey(workers, workerKey.id, { revoked_at: 9 }, 9, ctx()),
        ],
        ['keys.rotateKey', () => h.store.keys.rotateKey(personal, personalKey.id, replacement, 9, ctx())],
        ['keys.rotateAllKeys', () => h.store.keys.rotateAllKeys(workers, replacement, 9, ctx())],
        ['orgs.createTeamOrg', () => h.store.orgs.createTeamOrg('Another', owner.id, 9, ctx())],
        ['orgs.addMember', () => h.store.orgs.addMember(team.id, outsider.id, 'admin', 9, ctx())],
        [
          'orgs.changeMemberRole',
          () => h.store.orgs.changeMemberRole(team.id, member.id, 'admin', 'owner', 9, ctx()),
        ],
        ['orgs.removeMember', () => h.store.orgs.removeMember(team.id, member.id, false, 'owner', 9, ctx())],
        [
          'orgs.removeMember (leaving)',
          () => h.store.orgs.removeMember(team.id, member.id, true, 'viewer', 9, ctx()),
        ],
        ['orgs.deleteOrg', () => h.store.orgs.deleteOrg(doomed.id, 9, ctx())],
        ['fleet.removeWorker', () => h.store.fleet.removeWorker(team.id, 'wrk_1', 9, ctx())],
        ['files.remove', () => h.store.files.remove('file-kept', owner.id, 9, ctx())],
        ['files.expire (retention)', () => h.store.files.expire(9, 100, SYSTEM_AUDIT)],
        [
          'catalogue.upsertEntries',
          () =>
            h.store.catalogue.upsertEntries(
              [manifestEntry('m-1', { display_name: 'renamed' }), manifestEntry('m-2')],
              9,
              SYSTEM_AUDIT,
            ),
        ],
        ['audit.expire (retention)', () => h.store.audit.expire(100, 100, 9, SYSTEM_AUDIT)],
      ]
      for (const [name, change] of changes) {
        const outcome = await change().then(
          () => 'written',
          (e) => whyRefused(e),
        )
        // Refused by the entry, not by anything before it: the change was about to happen.
        expect([name, outcome]).toEqual([name, expect.stringContaining(REFUSED)])
      }
      expect(await everything(h, kind)).toEqual(before)
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
