import { afterEach, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { embeddedMigrations } from '../../src/db/pg/migrations.gen'
import * as schema from '../../src/db/pg/schema'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import type { CatalogueEntry } from '../../src/domain/catalogue'
import { postgresStore } from '../../src/store/postgres'
import { migratePostgres, openPostgres, type PgDb } from '../../src/store/postgres/db'
import { manifestEntry } from '../helpers/catalogue'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import { clock, type StoreHarness, storeConfig, storeEngines } from '../helpers/stores'

// On PostgreSQL every jsonb column holds the JSON value itself, an object or an array (docs/api.md §12:
// the database is PostgreSQL's to query), so `->>`, `@>` and `?` see into it. Older versions stored
// each value as a JSON string of its text; the jsonb_values migration unwraps those rows.

const openPg = storeEngines.find(([kind]) => kind === 'postgres')![1]

async function seed(exec: (sql: string) => Promise<unknown>) {
  await exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO files (id, user_id, filename, purpose, bytes, created_at)
      VALUES ('file-a', 'user_a', 'a.jsonl', 'batch', 10, 1);`)
}

/** A vLLM entry with an explicit profile whose params are a JSON object. */
const entry = (id: string, o: Partial<CatalogueEntry> = {}) =>
  manifestEntry(id, {
    runtime: 'vllm',
    runtime_model_id: `org/${id}`,
    quantization: null,
    serving_profiles: [
      { runtime: 'vllm', runtime_model_id: `org/${id}`, params: { max_model_len: 8192 }, derived: false },
    ],
    ...o,
  })

const usage = { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 }

describeWith(postgres, 'postgres jsonb columns', () => {
  let h: StoreHarness
  afterEach(async () => {
    await h?.close()
  })

  const column = (sql: string) => h.one<Record<string, string | boolean>>(sql)

  test('batches.create and queue.recordResults store metadata and usage as objects', async () => {
    h = await openPg()
    await seed(h.exec)
    await h.exec(`INSERT INTO workers (id, org_id, name, status, registered_at, last_seen_at)
      VALUES ('wrk_1', 'org_a', 'w', 'online', 1, 1)`)
    const batch = {
      id: 'batch_1',
      user_id: 'user_a',
      api_key_id: null,
      input_file_id: 'file-a',
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      metadata: { project: 'alpha' },
      now: 10,
    }
    await h.store.batches.create(batch, () => {})
    expect(
      await column(`SELECT jsonb_typeof(metadata) AS t, metadata ->> 'project' AS project,
        metadata @> '{"project": "alpha"}' AS contains FROM batches`),
    ).toEqual({ t: 'object', project: 'alpha', contains: true })

    await h.exec(`UPDATE batches SET status = 'validated', model = 'm' WHERE id = 'batch_1'`)
    const claimed = await h.store.queue.claim({
      workerId: 'wrk_1',
      orgId: 'org_a',
      maxConcurrent: 1,
      candidates: [{ model: 'm', loaded: false, match: 'm' }],
      now: 20,
    })
    const row = await h.store.queue.recordResults({
      batchId: 'batch_1',
      workerId: 'wrk_1',
      assignmentId: claimed!.assignmentId,
      changes: { usage, request_counts_completed: 1, completed_at: 30 },
      files: [],
      now: 30,
    })
    expect(row.usage).toEqual(usage)
    expect(
      await column(`SELECT jsonb_typeof(usage) AS t, usage ->> 'total_tokens' AS total FROM batches`),
    ).toEqual({ t: 'object', total: '7' })
  })

  test('catalogue.upsertEntries stores capabilities and profile params as objects, inserted or updated', async () => {
    h = await openPg()
    const cat = h.store.catalogue
    const stored = () =>
      column(`SELECT jsonb_typeof(e.capabilities) AS caps, e.capabilities ->> 'vision' AS vision,
          jsonb_typeof(p.params) AS params, p.params ->> 'max_model_len' AS len
        FROM catalog_entries e JOIN serving_profiles p ON p.catalog_id = e.id`)
    await cat.upsertEntries([entry('a', { capabilities: { vision: false } })], 10, SYSTEM_AUDIT)
    expect(await stored()).toEqual({ caps: 'object', vision: 'false', params: 'object', len: '8192' })
    // The update path (UPDATE … SET) writes them the same way.
    const changed = entry('a', {
      capabilities: { vision: true },
      serving_profiles: [
        { runtime: 'vllm', runtime_model_id: 'org/a', params: { max_model_len: 4096 }, derived: false },
      ],
    })
    expect((await cat.upsertEntries([changed], 20, SYSTEM_AUDIT))[0]!.result).toBe('updated')
    expect(await stored()).toEqual({ caps: 'object', vision: 'true', params: 'object', len: '4096' })
    expect((await cat.entry('a'))?.capabilities).toEqual({ vision: true })
  })

  test('fleet.heartbeat stores loaded_models as an array', async () => {
    h = await openPg()
    await seed(h.exec)
    const { worker } = (await h.store.fleet.register({
      orgId: 'org_a',
      workerId: undefined,
      machineId: undefined,
      fields: {
        name: 'box',
        hostname: null,
        daemon_version: null,
        key_id: null,
        max_concurrent_jobs: 1,
        max_download_gb: 0,
      },
      runtimes: [],
      gpus: [],
      models: [],
      now: 100,
    })) as { worker: { id: string } }
    await h.store.fleet.heartbeat({
      workerId: worker.id,
      orgId: 'org_a',
      activity: 'idle',
      vram_total_gb: null,
      vram_available_gb: null,
      gpu_utilization: null,
      gpu_memory_used_gb: null,
      uptime_seconds: null,
      loaded_models: ['llama3:8b', 'qwen2.5:7b'],
      current_job_id: null,
      now: 200,
      cutoff: 0,
    })
    expect(
      await column(`SELECT jsonb_typeof(loaded_models) AS t, loaded_models ->> 1 AS second,
        loaded_models ? 'llama3:8b' AS has FROM workers`),
    ).toEqual({ t: 'array', second: 'qwen2.5:7b', has: true })
    expect((await h.store.fleet.findWorker(worker.id))?.loaded_models).toEqual(['llama3:8b', 'qwen2.5:7b'])
  })
})

describeWith(postgres, 'postgres jsonb_values migration', () => {
  const index = embeddedMigrations.journal.entries.findIndex((e) => e.tag.endsWith('_jsonb_values'))
  const before = {
    journal: {
      ...embeddedMigrations.journal,
      entries: embeddedMigrations.journal.entries.slice(0, index),
    },
    sql: embeddedMigrations.sql,
  }

  let db: PgDb | undefined
  afterEach(async () => {
    await db?.$client.close()
  })

  test("string-wrapped rows read the same through the store's decoding before and after it, and become JSON values", async () => {
    expect(index).toBeGreaterThan(0)
    db = openPostgres({ url: await freshPostgresUrl(), max: 2 })
    await migratePostgres(db, before)
    const pg = db.$client
    await seed((sql) => pg.unsafe(sql))
    // The old way: the value's text bound as a string parameter, which Bun.SQL encodes as a JSON
    // string in a jsonb column. One batch of each form, and a null usage.
    const wrapped = (v: unknown) => JSON.stringify(v)
    await pg`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        metadata, usage, created_at, completed_at, updated_at) VALUES
      ('b_old', 'user_a', 'file-a', 'e', '24h', 'm', 'completed', ${wrapped({ project: 'alpha' })}, ${wrapped(usage)}, 1, 86400, 1),
      ('b_new', 'user_a', 'file-a', 'e', '24h', 'm', 'completed', ${{ project: 'beta' }}, ${usage}, 1, 86400, 1),
      ('b_null', 'user_a', 'file-a', 'e', '24h', 'm', 'completed', NULL, NULL, 1, 86400, 1)`
    await pg`INSERT INTO catalog_entries (id, display_name, capabilities, created_at, updated_at)
      VALUES ('cat-a', 'A', ${wrapped({ tools: true })}, 1, 1)`
    await pg`INSERT INTO serving_profiles (catalog_id, runtime, runtime_model_id, params)
      VALUES ('cat-a', 'vllm', 'org/a', ${wrapped({ max_model_len: 8192 })})`
    await pg`INSERT INTO workers (id, org_id, name, status, loaded_models, registered_at, last_seen_at)
      VALUES ('wrk_old', 'org_a', 'w', 'online', ${wrapped(['llama3:8b'])}, 1, 1)`
    const kinds = async () =>
      [
        ...(await pg`SELECT jsonb_typeof(metadata) AS m, jsonb_typeof(usage) AS u FROM batches ORDER BY id`),
        ...(await pg`SELECT jsonb_typeof(capabilities) AS c FROM catalog_entries`),
        ...(await pg`SELECT jsonb_typeof(params) AS p FROM serving_profiles`),
        ...(await pg`SELECT jsonb_typeof(loaded_models) AS l FROM workers`),
      ] as Record<string, string | null>[]
    expect(await kinds()).toEqual([
      { m: 'object', u: 'object' },
      { m: null, u: null },
      { m: 'string', u: 'string' },
      { c: 'string' },
      { p: 'string' },
      { l: 'string' },
    ])

    // Before jsonb_values the database also lacks the columns later migrations add, which the
    // store's whole-row reads name: the rows are read through the store's own decoding (the
    // schema's jsonb columns, src/db/pg/jsonb.ts), naming only these columns. After it, through the
    // store itself, and through the same columns again.
    const { batches, catalogEntries, servingProfiles, workers } = schema
    const decoded = async (q: PgDb) => ({
      batches: await Promise.all(
        ['b_old', 'b_new', 'b_null'].map(async (id) => {
          const [b] = await q
            .select({ metadata: batches.metadata, usage: batches.usage })
            .from(batches)
            .where(eq(batches.id, id))
          return { metadata: b?.metadata, usage: b?.usage }
        }),
      ),
      capabilities: (
        await q
          .select({ c: catalogEntries.capabilities })
          .from(catalogEntries)
          .where(eq(catalogEntries.id, 'cat-a'))
      )[0]?.c,
      params: (await q.select({ p: servingProfiles.params }).from(servingProfiles)).map((r) => r.p),
      loaded: (await q.select({ l: workers.loaded_models }).from(workers).where(eq(workers.id, 'wrk_old')))[0]
        ?.l,
    })
    const store = postgresStore(db, storeConfig(), 'inst_jsonb', clock)
    const read = async () => ({
      batches: await Promise.all(
        ['b_old', 'b_new', 'b_null'].map(async (id) => {
          const b = await store.batches.get(id, null)
          return { metadata: b?.metadata, usage: b?.usage }
        }),
      ),
      capabilities: (await store.catalogue.entry('cat-a'))?.capabilities,
      params: (await store.catalogue.readCatalogue()).profiles.map((p) => p.params),
      loaded: (await store.fleet.findWorker('wrk_old'))?.loaded_models,
    })
    const expected = {
      batches: [
        { metadata: { project: 'alpha' }, usage },
        { metadata: { project: 'beta' }, usage },
        { metadata: null, usage: null },
      ],
      capabilities: { tools: true },
      params: [{ max_model_len: 8192 }],
      loaded: ['llama3:8b'],
    }
    expect(await decoded(db)).toEqual(expected)

    await migratePostgres(db)
    expect(await kinds()).toEqual([
      { m: 'object', u: 'object' },
      { m: null, u: null },
      { m: 'object', u: 'object' },
      { c: 'object' },
      { p: 'object' },
      { l: 'array' },
    ])
    expect(await decoded(db)).toEqual(expected)
    expect(await read()).toEqual(expected)
    // SQL now sees into every row: both batches' tokens are summed.
    const sums = await store.usage.sums(
      { kind: 'user', userId: 'user_a' },
      { start: 0, end: 2 * 86400 },
      'model',
    )
    expect(sums.map((s) => s.total_tokens)).toEqual([14])
  })
})
