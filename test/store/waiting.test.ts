import { afterAll, afterEach, beforeAll, expect, test } from 'bun:test'
import type { SQL } from 'bun'
import { queueAhead } from '../../src/store/postgres/batches'
import { closePostgres, migratePostgres, openPostgres, type PgDb } from '../../src/store/postgres/db'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import { describeEngine, lit as q, type StoreHarness, storeEngines } from '../helpers/stores'

// What docs/api.md §6 `waiting` reads, the same on SQLite and PostgreSQL: a batch's place in the
// queue of its model, the workers hosting a model by name, and the model's download asks.

async function seed(h: StoreHarness) {
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO catalog_entries (id, display_name, created_at, updated_at) VALUES ('m-a', 'A', 1, 1);`)
}

let n = 0
/** A batch of `model`; its seq is its order of insertion. */
async function batch(
  h: StoreHarness,
  o: { model?: string; status?: string; user?: string; total?: number; completed?: number; failed?: number },
) {
  const id = `batch_${++n}`
  await h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, request_counts_completed, request_counts_failed, created_at, updated_at)
    VALUES (${q(id)}, ${q(o.user ?? 'user_a')}, 'file-x', '/v1/chat/completions', '24h', ${q(o.model ?? 'm-a')},
      ${q(o.status ?? 'validated')}, ${o.total ?? 10}, ${o.completed ?? 0}, ${o.failed ?? 0}, 1, 1);`)
  const row = await h.one<{ seq: number }>(
    `SELECT CAST(seq AS INTEGER) AS seq FROM batches WHERE id = ${q(id)}`,
  )
  return { id, seq: Number(row.seq) }
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} waiting reads`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('queueTallies: the validated batches of its models before it, and those models in progress', async () => {
      h = await open()
      await seed(h)
      const a1 = await batch(h, { total: 3 })
      // A requeued split batch keeps its done shards' counts: 10 − 4 − 1 are left.
      const a2 = await batch(h, { user: 'user_b', total: 10, completed: 4, failed: 1 })
      await batch(h, { model: 'm-other', total: 50 })
      await batch(h, { status: 'in_progress', total: 8, completed: 2 })
      await batch(h, { status: 'completed', total: 9, completed: 9 })
      // The entry's retired slug is its queue too.
      const old = await batch(h, { model: 'm-old', total: 4 })
      const mine = await batch(h, { total: 6 })
      await batch(h, { total: 100 }) // after it: not ahead
      const tallies = await h.store.batches.queueTallies([
        { batchId: mine.id, seq: mine.seq, models: ['m-a', 'm-old'] },
        { batchId: a2.id, seq: a2.seq, models: ['m-a'] },
        { batchId: a1.id, seq: a1.seq, models: ['m-a'] },
      ])
      const running = { batches: 1, requests: 6 }
      expect(tallies.get(mine.id)).toEqual({ ahead: { batches: 3, requests: 3 + 5 + 4 }, running })
      expect(tallies.get(a2.id)).toEqual({ ahead: { batches: 1, requests: 3 }, running })
      expect(tallies.get(a1.id)).toEqual({ ahead: { batches: 0, requests: 0 }, running })
      expect(old.seq).toBeLessThan(mine.seq)
      expect(await h.store.batches.queueTallies([])).toEqual(new Map())
    })

    test('hostsNamed: every worker hosting one of the names, online or not, with its hosting', async () => {
      h = await open()
      await seed(h)
      await h.exec(`
        INSERT INTO workers (id, org_id, name, status, activity, vram_total_gb, loaded_models,
            loading_models, shards, registered_at, last_heartbeat_at, last_seen_at)
          VALUES ('wrk_1', 'org_a', 'box-1', 'online', 'idle', 24, '[]', '["x:1"]', TRUE, 1, 5, 100),
                 ('wrk_2', 'org_a', 'box-2', 'offline', 'idle', NULL, '[]', '[]', FALSE, 1, NULL, 50),
                 ('wrk_3', 'org_a', 'box-3', 'online', 'idle', 24, '[]', '[]', FALSE, 1, 5, 100);
        -- docs/api.md §7 Poll rule 2 reads each GPU's memory (heartbeat gpus).
        UPDATE workers SET gpu_memory = '[{"index":0,"memory_used_gb":2,"memory_total_gb":24}]' WHERE id = 'wrk_1';
        -- docs/api.md §7 heartbeat load_failures: a model it does not load again yet.
        UPDATE workers SET load_failures = '[{"name":"x:1","error":"exit code 1","failures":2,"retry_at":200}]' WHERE id = 'wrk_1';
        INSERT INTO worker_runtimes (worker_id, engine, base_url, status, capabilities)
          VALUES ('wrk_1', 'ollama', 'http://a', 'online', NULL),
                 ('wrk_1', 'vllm', 'http://b', 'online', '{"logprobs":false}');
        INSERT INTO worker_models (worker_id, name, runtime, digest, loaded, advertised, configured, on_disk)
          VALUES ('wrk_1', 'x:1', 'ollama', NULL, FALSE, TRUE, FALSE, TRUE),
                 ('wrk_1', 'other:1', 'ollama', 'abc', TRUE, FALSE, FALSE, TRUE),
                 ('wrk_2', 'x:1', NULL, NULL, FALSE, TRUE, TRUE, FALSE),
                 ('wrk_3', 'y:1', 'ollama', NULL, FALSE, TRUE, FALSE, TRUE);`)
      const hosts = await h.store.fleet.hostsNamed(['x:1', 'nobody:1'])
      expect(hosts).toEqual([
        {
          worker: {
            id: 'wrk_1',
            org_id: 'org_a',
            name: 'box-1',
            status: 'online',
            last_seen_at: 100,
            last_heartbeat_at: 5,
            vram_total_gb: 24,
            gpu_memory: [{ index: 0, memory_used_gb: 2, memory_total_gb: 24 }],
            loading_models: ['x:1'],
            load_failures: [{ name: 'x:1', error: 'exit code 1', failures: 2, retry_at: 200 }],
            shards: true,
          },
          hosting: {
            engines: ['ollama', 'vllm'],
            // docs/api.md §7: what each runtime reported it can do (none: its engine's defaults).
            reported: { vllm: { logprobs: false } },
            // Every model of a host: an artifact's other files count (docs/api.md §4).
            models: [
              {
                name: 'x:1',
                runtime: 'ollama',
                digest: null,
                loaded: false,
                advertised: true,
                configured: false,
                on_disk: true,
              },
              {
                name: 'other:1',
                runtime: 'ollama',
                digest: 'abc',
                loaded: true,
                advertised: false,
                configured: false,
                on_disk: true,
              },
            ],
          },
        },
        {
          worker: {
            id: 'wrk_2',
            org_id: 'org_a',
            name: 'box-2',
            status: 'offline',
            last_seen_at: 50,
            last_heartbeat_at: null,
            vram_total_gb: null,
            gpu_memory: [],
            loading_models: [],
            load_failures: [],
            shards: false,
          },
          hosting: {
            engines: [],
            reported: {},
            models: [
              {
                name: 'x:1',
                runtime: null,
                digest: null,
                loaded: false,
                advertised: true,
                configured: true,
                on_disk: false,
              },
            ],
          },
        },
      ])
      expect(await h.store.fleet.hostsNamed([])).toEqual([])
      expect(await h.store.fleet.hostsNamed(['nobody:1'])).toEqual([])
    })

    test('pullsFor: the asks for the entries, with their worker’s name, org and liveness', async () => {
      h = await open()
      await seed(h)
      await h.exec(`
        INSERT INTO catalog_entries (id, display_name, created_at, updated_at) VALUES ('m-b', 'B', 1, 1);
        INSERT INTO workers (id, org_id, name, status, activity, loaded_models, registered_at, last_seen_at)
          VALUES ('wrk_1', 'org_a', 'box-1', 'online', 'downloading_model', '[]', 1, 100);
        INSERT INTO model_pulls (catalog_id, worker_id, runtime, runtime_model_id, asked_at, last_progress_at,
            progress_status, completed_bytes, total_bytes)
          VALUES ('m-a', 'wrk_1', 'ollama', 'a:1', 10, 90, 'downloading', 300, 1000),
                 ('m-b', 'wrk_1', 'ollama', 'b:1', 10, 10, NULL, NULL, NULL);`)
      expect(await h.store.fleet.pullsFor(['m-a', 'm-none'])).toEqual([
        {
          pull: {
            catalog_id: 'm-a',
            worker_id: 'wrk_1',
            runtime: 'ollama',
            runtime_model_id: 'a:1',
            asked_at: 10,
            last_progress_at: 90,
            progress_status: 'downloading',
            completed_bytes: 300,
            total_bytes: 1000,
          },
          worker: { name: 'box-1', org_id: 'org_a', status: 'online', last_seen_at: 100 },
        },
      ])
      expect(await h.store.fleet.pullsFor([])).toEqual([])
    })
  })
}

describeWith(postgres, 'postgres waiting plan', () => {
  // docs/api.md §6: the batches ahead of one are a range of batches_validated_model, however many
  // batches of other models or other states the table holds.
  let db: PgDb
  beforeAll(async () => {
    db = openPostgres({ url: await freshPostgresUrl(), max: 2 })
    await migratePostgres(db)
    await db.$client.unsafe(`
      INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
        VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
      INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
          request_counts_total, created_at, updated_at)
        SELECT 'batch_' || g, 'user_a', 'file-x', '/v1/chat/completions', '24h',
          CASE WHEN g % 10 = 0 THEN 'm-a' ELSE 'm-' || (g % 7) END,
          CASE WHEN g % 3 = 0 THEN 'validated' ELSE 'completed' END, 1, 1, 1
        FROM generate_series(1, 20000) g;
      ANALYZE batches;`)
  })
  afterAll(async () => {
    await closePostgres(db)
  })

  test('the batches ahead are a range of batches_validated_model', async () => {
    const explaining = (strings: TemplateStringsArray, ...values: unknown[]) => {
      const text = [`EXPLAIN ${strings[0]}`, ...strings.slice(1)]
      Object.defineProperty(text, 'raw', { value: text })
      return db.$client(text as unknown as TemplateStringsArray, ...values)
    }
    const rows = (await queueAhead(explaining as unknown as SQL, [
      { id: 'batch_x', model: 'm-a', seq: 15000 },
    ])) as unknown as { 'QUERY PLAN': string }[]
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n')
    expect(plan).toContain('batches_validated_model')
    expect(plan).not.toContain('Seq Scan on batches')
    const [tally] = await queueAhead(db.$client, [{ id: 'batch_x', model: 'm-a', seq: 15000 }])
    // Every 30th batch up to 14,999 is validated and of m-a.
    expect(tally).toEqual({ batchId: 'batch_x', batches: 499, requests: 499 })
  })
})
