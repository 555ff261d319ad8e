import { afterAll, beforeAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { migratePostgres, openPostgres, type PgDb } from '../../src/store/postgres/db'
import { claimHeads } from '../../src/store/postgres/queue'
import { freshPostgresUrl } from '../helpers/postgres'

// The PostgreSQL claim finds each model's oldest validated batch with one probe of
// batches_status_model (API.md §7), however many batches of other models, or batches already
// claimed, precede it in seq order: a plan walking the primary key would step over all of them.

let db: PgDb

beforeAll(async () => {
  db = openPostgres({ url: await freshPostgresUrl(), max: 2 })
  await migratePostgres(db)
  await db.$client.unsafe(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_o' || g, 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-other',
        CASE WHEN g % 2 = 0 THEN 'validated' ELSE 'in_progress' END, 1, 1, 1
      FROM generate_series(1, 5000) g;
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_l' || g, 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-late', 'validated',
        1, 1, 1
      FROM generate_series(1, 5000) g;
    ANALYZE batches;`)
})

afterAll(async () => {
  await db.$client.close()
})

test('postgres claim: the head of a model whose batches come last in seq order is an index probe', async () => {
  const plan = (await db.execute(sql`EXPLAIN ${claimHeads(['m-late', 'm-other'])}`)) as unknown as {
    'QUERY PLAN': string
  }[]
  const text = plan.map((r) => r['QUERY PLAN']).join('\n')
  expect(text).toContain('Index Scan using batches_status_model on batches')
  expect(text).not.toContain('batches_pkey')
  expect(text).not.toContain('Sort')
})

test('postgres claim: the heads found are the oldest validated batch of each model', async () => {
  const rows = (await db.transaction((tx) => tx.execute(claimHeads(['m-late', 'm-other'])))) as unknown as {
    i: number
    id: string
  }[]
  expect(rows.map((r) => [r.i, r.id]).sort()).toEqual([
    [0, 'batch_l1'],
    [1, 'batch_o2'],
  ])
})
