import { afterEach, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { migrate } from '../../src/db/migrate'
import { openDb } from '../../src/db/open'
import * as pg from '../../src/db/pg/schema'
import * as lite from '../../src/db/schema'
import { migratePostgres, openPostgres } from '../../src/store/postgres/db'
import { postgresDialect, postgresUsage } from '../../src/store/postgres/usage'
import { sqliteDialect } from '../../src/store/sqlite/usage'
import type { UsageGroup, UsageScope, UsageSums } from '../../src/store/usage'
import { usageQuery } from '../../src/store/usage-query'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres, testWith } from '../helpers/requires'
import { describeEngine, lit as q, type StoreHarness, storeEngines } from '../helpers/stores'

// The usage part sums the same on SQLite and on PostgreSQL (docs/api.md §12, §14).

const DAY = 86_400
const D0 = 20_000 * DAY
const range = { start: D0, end: D0 + 2 * DAY }

let seq = 0
async function batch(
  h: StoreHarness,
  o: {
    user?: string
    key?: string | null
    model?: string
    status?: string
    completedAt: number | null
    requests?: number
    usage?: Record<string, number> | null
    org?: string
  },
) {
  const id = `batch_${++seq}`
  await h.exec(`INSERT INTO batches (id, user_id, api_key_id, input_file_id, endpoint, completion_window, model,
      status, request_counts_total, request_counts_completed, usage, created_at, completed_at, updated_at)
    VALUES (${q(id)}, ${q(o.user ?? 'user_a')}, ${q(o.key ?? null)}, 'file-x', '/v1/chat/completions', '24h',
      ${q(o.model ?? 'm1')}, ${q(o.status ?? 'completed')}, ${o.requests ?? 1}, ${o.requests ?? 1},
      ${o.usage === null ? 'NULL' : q(JSON.stringify(o.usage ?? {}))}, 1, ${o.completedAt ?? 'NULL'}, 1);`)
  if (o.org) {
    await h.exec(`INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at, completed_at)
      VALUES (${q(`asg_${id}`)}, ${q(id)}, 'wrk_1', ${q(o.org)}, 1, ${o.completedAt ?? 'NULL'});`)
  }
  return id
}

/** user_a: three completed batches in the range (two days, two models, a key, the dashboard, a
 * key whose row is gone); user_b: one. Around them, what must not count. */
async function seed(h: StoreHarness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO api_keys (id, key_type, name, prefix, key_hash, user_id, created_at, revoked_at)
      VALUES ('key_1', 'personal', 'laptop', 'gk-AAAAAAAAA', 'h1', 'user_a', 1, 5);`)
  // A batch's usage as upload-results keeps it (src/domain/usage.ts): cached_tokens where a line had them.
  const tokens = (p: number, c: number, cached?: number) => ({
    prompt_tokens: p,
    completion_tokens: c,
    total_tokens: p + c,
    ...(cached === undefined ? {} : { cached_tokens: cached }),
  })
  await batch(h, { key: 'key_1', completedAt: D0 + 100, requests: 3, usage: tokens(10, 20, 6), org: 'org_x' })
  await batch(h, { model: 'm2', completedAt: D0 + DAY + 5, requests: 2, usage: tokens(1, 2), org: 'org_y' })
  // An embedding batch: no completion tokens.
  await batch(h, {
    key: 'key_gone',
    completedAt: D0 + DAY + 50,
    usage: { prompt_tokens: 4, total_tokens: 4 },
    org: 'org_x',
  })
  await batch(h, {
    user: 'user_b',
    completedAt: D0 + 300,
    requests: 5,
    usage: tokens(100, 100, 90),
    org: 'org_x',
  })
  // Not counted: failed (validation stamps completed_at too), still running, outside [start, end).
  await batch(h, { status: 'failed', completedAt: D0 + 200, usage: null })
  await batch(h, { status: 'in_progress', completedAt: null, usage: null, org: 'org_x' })
  await batch(h, { completedAt: D0 - 1, usage: tokens(1000, 0, 999), org: 'org_x' })
  await batch(h, { completedAt: D0 + 2 * DAY, usage: tokens(1000, 0), org: 'org_x' })
}

const counted = (
  n: number,
  requests: number,
  prompt_tokens: number,
  cached_tokens: number,
  completion_tokens: number,
  total_tokens: number,
) => ({ batches: n, requests, prompt_tokens, cached_tokens, completion_tokens, total_tokens })
const noLabel = { prefix: null, name: null, email: null }
const byGroup = (rows: UsageSums[]) => rows.toSorted((x, y) => String(x.group).localeCompare(String(y.group)))

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} usage`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })
    const run = (scope: UsageScope, groupBy: UsageGroup) =>
      h.store.usage.sums(scope, range, groupBy).then(byGroup)

    test('a user’s completed batches in [start, end) per UTC day, model and key', async () => {
      h = await open()
      await seed(h)
      const me: UsageScope = { kind: 'user', userId: 'user_a' }
      expect(await run(me, 'day')).toEqual([
        { group: D0, label: noLabel, ...counted(1, 3, 10, 6, 20, 30) },
        { group: D0 + DAY, label: noLabel, ...counted(2, 3, 5, 0, 2, 7) },
      ])
      expect(await run(me, 'model')).toEqual([
        { group: 'm1', label: noLabel, ...counted(2, 4, 14, 6, 20, 34) },
        { group: 'm2', label: noLabel, ...counted(1, 2, 1, 0, 2, 3) },
      ])
      // The revoked key keeps its row, so its prefix; a key id with no row has no label.
      expect(await run(me, 'key')).toEqual([
        {
          group: 'key_1',
          label: { prefix: 'gk-AAAAAAAAA', name: 'laptop', email: null },
          ...counted(1, 3, 10, 6, 20, 30),
        },
        { group: 'key_gone', label: noLabel, ...counted(1, 1, 4, 0, 0, 4) },
        { group: null, label: noLabel, ...counted(1, 2, 1, 0, 2, 3) },
      ])
      expect(await run({ kind: 'user', userId: 'user_nobody' }, 'day')).toEqual([])
    })

    test('an org’s view is the batches its workers completed, whoever owns them', async () => {
      h = await open()
      await seed(h)
      expect(await run({ kind: 'org', orgId: 'org_x' }, 'day')).toEqual([
        { group: D0, label: noLabel, ...counted(2, 8, 110, 96, 120, 230) },
        { group: D0 + DAY, label: noLabel, ...counted(1, 1, 4, 0, 0, 4) },
      ])
      expect(await run({ kind: 'org', orgId: 'org_y' }, 'model')).toEqual([
        { group: 'm2', label: noLabel, ...counted(1, 2, 1, 0, 2, 3) },
      ])
    })

    test('everyone: per user with the owner’s email, and in total', async () => {
      h = await open()
      await seed(h)
      expect(await run({ kind: 'all' }, 'user')).toEqual([
        {
          group: 'user_a',
          label: { prefix: null, name: null, email: 'a@x.test' },
          ...counted(3, 6, 15, 6, 22, 37),
        },
        {
          group: 'user_b',
          label: { prefix: null, name: null, email: 'b@x.test' },
          ...counted(1, 5, 100, 90, 100, 200),
        },
      ])
      expect(await run({ kind: 'all' }, 'model')).toEqual([
        { group: 'm1', label: noLabel, ...counted(3, 9, 114, 96, 120, 234) },
        { group: 'm2', label: noLabel, ...counted(1, 2, 1, 0, 2, 3) },
      ])
    })
  })
}

testWith(
  postgres,
  'postgres: usage as the app writes it through drizzle is a JSON object, summed with usage written by SQL',
  async () => {
    const db = openPostgres({ url: await freshPostgresUrl(), max: 2 })
    try {
      await migratePostgres(db)
      await db.insert(pg.users).values({
        id: 'u',
        email: 'u@x.test',
        password_hash: 'h',
        full_name: 'U',
        created_at: 1,
        updated_at: 1,
      })
      const row = {
        user_id: 'u',
        input_file_id: 'f',
        endpoint: 'e',
        completion_window: '24h',
        model: 'm',
      } as const
      await db.insert(pg.batches).values([
        {
          ...row,
          id: 'b1',
          status: 'completed',
          request_counts_completed: 2,
          usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7, cached_tokens: 2 },
          created_at: 1,
          completed_at: D0,
          updated_at: 1,
        },
        {
          ...row,
          id: 'b2',
          status: 'completed',
          request_counts_completed: 1,
          usage: null,
          created_at: 1,
          completed_at: D0,
          updated_at: 1,
        },
      ])
      await db.execute(sql`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_completed, usage, created_at, completed_at, updated_at)
      VALUES ('b3', 'u', 'f', 'e', '24h', 'm', 'completed', 1, '{"prompt_tokens": 10, "total_tokens": 10, "cached_tokens": 5}'::jsonb, 1, ${D0}, 1)`)
      const stored = await db.execute(
        sql`SELECT jsonb_typeof(usage) AS t, usage ->> 'total_tokens' AS total FROM batches WHERE id = 'b1'`,
      )
      expect([...(stored as unknown as { t: string; total: string }[])]).toEqual([
        { t: 'object', total: '7' },
      ])
      const sums = await postgresUsage(db).sums({ kind: 'user', userId: 'u' }, range, 'model')
      expect(sums).toEqual([{ group: 'm', label: noLabel, ...counted(3, 4, 13, 7, 4, 17) }])
    } finally {
      await db.$client.close()
    }
  },
)

// "Indexed so a query does not scan every batch of the installation": each scope's statement is
// an index range probe. PostgreSQL plans by cost, so its test fills a year of history first;
// SQLite's planner answers it directly.
const scopes: [UsageScope, string[]][] = [
  [{ kind: 'user', userId: 'user_a' }, ['batches_user_completed']],
  // The org's whole batches and the shards its workers ran (docs/api.md §16).
  [{ kind: 'org', orgId: 'org_x' }, ['batch_assignments_org', 'batch_shards_org']],
  [{ kind: 'all' }, ['batches_completed']],
]

describeWith(postgres, 'usage query plans', () => {
  test('sqlite: each scope probes its index', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gridkeep-usage-'))
    const { db, sqlite } = openDb({ path: join(dir, 'g.db') })
    try {
      migrate(db)
      for (const [scope, indexes] of scopes) {
        const query = usageQuery(lite, scope, range, 'day', sqliteDialect)
        const plan = db.all<{ detail: string }>(sql`EXPLAIN QUERY PLAN ${query}`).map((r) => r.detail)
        for (const index of indexes) expect(plan.join('\n')).toContain(`USING INDEX ${index} (`)
      }
    } finally {
      sqlite.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('postgres: each scope probes its index', async () => {
    const db = openPostgres({ url: await freshPostgresUrl(), max: 2 })
    try {
      await migratePostgres(db)
      // An installation with history, so the planner chooses by the statistics it will have:
      // 50 users × 5 models, completed over a year, each batch run by one of 10 orgs' workers.
      await db.execute(sql`INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
        SELECT 'user_' || chr(97 + u % 26) || u, 'u' || u || '@x', 'h', 'U', 0, 0 FROM generate_series(0, 49) u`)
      await db.execute(sql`UPDATE users SET id = 'user_a' WHERE id = 'user_a0'`)
      await db.execute(sql`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model,
          status, created_at, updated_at, completed_at)
        SELECT 'batch_' || i, (SELECT id FROM users ORDER BY seq OFFSET i % 50 LIMIT 1), 'file_x',
          '/v1/chat/completions', '24h', 'm' || (i % 5), 'completed', 0, 0,
          ${range.start} - 365 * 86400 + (i * 1607) % (366 * 86400)
        FROM generate_series(1, 20000) i`)
      await db.execute(sql`INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at, completed_at)
        SELECT 'asg_' || b.seq, b.id, 'w', 'org_' || (b.seq % 10), 0, b.completed_at FROM batches b`)
      await db.execute(sql`UPDATE batch_assignments SET org_id = 'org_x' WHERE org_id = 'org_0'`)
      // And shards of split batches (docs/api.md §16) run by the same orgs' workers.
      await db.execute(sql`INSERT INTO batch_shards (id, batch_id, user_id, shard_index, first_request, requests,
          status, org_id, completed_at, updated_at)
        SELECT 'shard_' || b.seq, b.id, b.user_id, 0, 0, 1, 'done', 'org_' || (b.seq % 10), b.completed_at, 0
        FROM batches b`)
      await db.execute(sql`UPDATE batch_shards SET org_id = 'org_x' WHERE org_id = 'org_0'`)
      await db.execute(sql`ANALYZE`)
      for (const [scope, indexes] of scopes) {
        const query = usageQuery(pg, scope, range, 'day', postgresDialect)
        const plan = [...((await db.execute(sql`EXPLAIN ${query}`)) as unknown as { 'QUERY PLAN': string }[])]
        for (const index of indexes) expect(plan.map((r) => r['QUERY PLAN']).join('\n')).toContain(index)
      }
    } finally {
      await db.$client.close()
    }
  })
})
