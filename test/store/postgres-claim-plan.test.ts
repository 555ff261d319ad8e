import { afterAll, beforeAll, expect, test } from 'bun:test'
import type { SQL } from 'bun'
import { closePostgres, migratePostgres, openPostgres, type PgDb } from '../../src/store/postgres/db'
import { postgresFleet } from '../../src/store/postgres/fleet'
import { claimHeads, claimOne, headsCte, oldestWaiting } from '../../src/store/postgres/queue'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'

// The PostgreSQL claim finds the oldest validated batch of each owner of each candidate model with
// index probes of batches_status_model (docs/api.md §7, §14), however many batches of other models,
// batches already claimed, or batches needing what the worker cannot do (Poll rule 7) precede it
// in seq order: a plan walking the primary key would step over all of them.

describeWith(postgres, 'postgres claim plans', () => {
  let db: PgDb

  beforeAll(async () => {
    db = openPostgres({ url: await freshPostgresUrl(), max: 2 })
    await migratePostgres(db)
    await db.$client.unsafe(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_o' || g, 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-other',
        CASE WHEN g % 2 = 0 THEN 'validated' ELSE 'in_progress' END, 1, 1, 1
      FROM generate_series(1, 5000) g;
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_l' || g, CASE WHEN g % 1000 = 0 THEN 'user_b' ELSE 'user_a' END, 'file-x',
        '/v1/chat/completions', '24h', 'm-late', 'validated', 1, 1, 1
      FROM generate_series(1, 5000) g;
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, needs, status,
        request_counts_total, created_at, updated_at)
      SELECT 'batch_j' || g, 'user_b', 'file-x', '/v1/chat/completions', '24h', 'm-late', 'json_mode',
        'validated', 1, 1, 1
      FROM generate_series(1, 5000) g;
    ANALYZE batches;`)
  })

  afterAll(async () => {
    await closePostgres(db)
  })

  /** Candidate models whose batches need nothing. */
  const keys = (...models: string[]) => models.map((model) => ({ model, needs: '' }))

  /** The same tagged query, EXPLAINed (a statement; a fragment of one, such as headsCte, as it is). */
  const explaining =
    (q: SQL) =>
    (strings: TemplateStringsArray, ...values: unknown[]) => {
      if (!/^\s*(WITH|SELECT)\b/.test(strings[0]!)) return q(strings, ...values)
      const text = [`EXPLAIN ${strings[0]}`, ...strings.slice(1)]
      Object.defineProperty(text, 'raw', { value: text })
      return q(text as unknown as TemplateStringsArray, ...values)
    }

  /** The plan `run` gets on `q` (the transaction that set the plan cache mode). */
  async function plan(q: SQL, run: (q: SQL) => Promise<unknown>) {
    const rows = (await run(explaining(q) as unknown as SQL)) as { 'QUERY PLAN': string }[]
    return rows.map((r) => r['QUERY PLAN']).join('\n')
  }

  for (const mode of ['auto', 'force_generic_plan']) {
    test(`postgres claim (plan_cache_mode ${mode}): heads and the claim are probes of batches_status_model`, async () => {
      await db.$client.begin(async (q) => {
        await q.unsafe(`SET LOCAL plan_cache_mode = ${mode}`)
        for (let i = 0; i < 6; i++) {
          const heads = await plan(q, (e) => claimHeads(e, keys('m-late', 'm-other')))
          expect(heads).toContain('batches_status_model')
          expect(heads).not.toContain('batches_pkey')
          expect(heads).not.toContain('batches_status_user')
          expect(heads).not.toContain('Sort')
          const claim = await plan(q, (e) =>
            claimOne(
              e,
              { model: 'm-late', needs: '', user_id: 'user_a', seq: 0 },
              { id: 'a', workerId: 'w', orgId: 'o', now: 1, maxConcurrent: 1 },
            ),
          )
          expect(claim).toContain('batches_status_model')
          // From the chosen head on: the entries before it were walked by the heads read already.
          expect(claim).toMatch(/Index Cond: .*\(seq >= /)
          expect(claim).not.toContain('batches_status_user')
          // Nothing sorted but the worker's own open slots (at most max_concurrent_jobs rows), and its
          // open assignments never walked: the slot probes and the index of those without one.
          expect(claim).not.toMatch(/Sort Key: (?!batch_assignments\.slot$)/m)
          expect(claim).toContain('batch_assignments_slotless')
          expect(claim).toContain('batch_assignments_slot ')
          expect(claim).not.toContain('batch_assignments_worker')
        }
      })
    })
  }

  test("postgres claim (generic plan): each model's longest wait is one probe of batches_waiting (docs/api.md §7 placement)", async () => {
    await db.$client.begin(async (q) => {
      await q.unsafe('SET LOCAL plan_cache_mode = force_generic_plan')
      const probe = await plan(q, (e) => oldestWaiting(e, ['m-late', 'm-other']))
      expect(probe).toContain('batches_waiting')
      expect(probe).not.toContain('Seq Scan on batches')
      expect(probe).not.toContain('batches_status_model')
    })
    await db.$client.unsafe(`UPDATE batches SET queued_at = 500 WHERE id = 'batch_l7';
      UPDATE batches SET queued_at = 900 WHERE id = 'batch_l9'`)
    expect(await oldestWaiting(db.$client, ['m-late', 'm-other', 'm-none'])).toEqual([
      { model: 'm-late', at: 500 },
      { model: 'm-other', at: null },
      { model: 'm-none', at: null },
    ])
    await db.$client.unsafe(`UPDATE batches SET queued_at = NULL WHERE id IN ('batch_l7', 'batch_l9')`)
  })

  test('postgres claim: the heads found are the oldest validated batch of each owner of each model', async () => {
    const rows = await claimHeads(db.$client, keys('m-late', 'm-other', 'm-none'))
    expect(rows.map((r) => [r.model, r.user_id, r.id]).sort()).toEqual([
      ['m-late', 'user_a', 'batch_l1'],
      ['m-late', 'user_b', 'batch_l1000'],
      ['m-other', 'user_a', 'batch_o2'],
    ])
    // Poll rule 7: only a worker that can do json_mode sees the batches that need it, as heads of
    // their own beside the owner's plain ones.
    const withJson = await claimHeads(db.$client, [
      ...keys('m-late'),
      { model: 'm-late', needs: 'json_mode' },
    ])
    expect(withJson.map((r) => [r.needs, r.user_id, r.id]).sort()).toEqual([
      ['', 'user_a', 'batch_l1'],
      ['', 'user_b', 'batch_l1000'],
      ['json_mode', 'user_b', 'batch_j1'],
    ])
  })

  test('postgres claim: the heads read with the worker row (one statement) are the heads read alone, by the same probes', async () => {
    await db.$client.unsafe(`
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_p', 'org_a', 'p', 'online', 'idle', '[]', 1, 100);`)
    const ask = {
      keys: [...keys('m-late', 'm-other'), { model: 'm-late', needs: 'json_mode' }],
      wholeOnly: true,
    }
    const fleet = postgresFleet(db, { MAX_BATCH_ATTEMPTS: 3 })
    const found = await fleet.findWorkerWithHosting('wrk_p', undefined, ask)
    expect(found?.worker.id).toBe('wrk_p')
    expect(found?.hosting?.engines).toEqual([])
    const order = (r: { model: string; needs: string; user_id: string }) =>
      `${r.model} ${r.needs} ${r.user_id}`
    const sorted = <T extends { model: string; needs: string; user_id: string }>(rows: T[]) =>
      rows.map((r) => ({ ...r })).sort((x, y) => order(x).localeCompare(order(y)))
    expect(sorted(found!.heads!)).toEqual(sorted(await claimHeads(db.$client, ask.keys, true)))
    // No worker, no heads; without the ask, none read.
    expect(await fleet.findWorkerWithHosting('wrk_none', undefined, ask)).toBeUndefined()
    expect((await fleet.findWorkerWithHosting('wrk_p'))?.heads).toBeUndefined()
    await db.$client.begin(async (q) => {
      await q.unsafe('SET LOCAL plan_cache_mode = force_generic_plan')
      const probe = await plan(
        q,
        (e) =>
          e`WITH RECURSIVE ${headsCte(e, ask)} SELECT (SELECT count(*) FROM heads) FROM workers w WHERE w.id = 'wrk_p'`,
      )
      expect(probe).toContain('batches_status_model')
      expect(probe).not.toContain('batches_pkey')
      expect(probe).not.toContain('Sort')
    })
  })

  test('postgres claim: the poll runs its generic plans, planned once per connection', async () => {
    // Left to choose, PostgreSQL planned the heads anew for the models at hand at every poll (planning
    // cost more than running them): db.$claims always runs a prepared statement's generic plan.
    const conn = await db.$claims.reserve()
    try {
      for (let i = 0; i < 8; i++) await claimHeads(conn, keys('m-late'))
      const [stmt] = await conn`SELECT generic_plans::int AS generic, custom_plans::int AS custom
      FROM pg_prepared_statements WHERE statement LIKE '%WITH RECURSIVE heads%'
        AND statement NOT LIKE '%FROM workers%'`
      expect(stmt).toEqual({ generic: 8, custom: 0 })
    } finally {
      conn.release()
    }
  })
})
