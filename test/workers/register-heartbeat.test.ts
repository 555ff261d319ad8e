import { afterAll, describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { makeTestApp } from '../helpers/app'
import { makePersonalKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'
import {
  batchRow,
  heartbeat,
  heartbeatBody,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerBody,
  registerWorker,
  sha,
  workerRow,
} from '../helpers/workers'

const t = makeTestApp()
afterAll(() => t.close())

const modelsOf = async (id: string) => {
  const { db, tables } = rowsOf(t.deps)
  const rows = await db.select().from(tables.workerModels).where(eq(tables.workerModels.worker_id, id))
  return rows.sort((a, b) => a.name.localeCompare(b.name))
}
const gpusOf = (id: string) => {
  const { db, tables } = rowsOf(t.deps)
  return db.select().from(tables.workerGpus).where(eq(tables.workerGpus.worker_id, id))
}
const runtimesOf = (id: string) => {
  const { db, tables } = rowsOf(t.deps)
  return db.select().from(tables.workerRuntimes).where(eq(tables.workerRuntimes.worker_id, id))
}
const workerCount = () => {
  const { db, tables } = rowsOf(t.deps)
  return db.$count(tables.workers)
}
const setOffline = async (id: string) => {
  const { db, tables } = rowsOf(t.deps)
  await db.update(tables.workers).set({ status: 'offline' }).where(eq(tables.workers.id, id))
}

describe('credentials on /workers', () => {
  test('no credential, a JWT or a personal key → 401; an unknown key → 401', async () => {
    const f = await makeFleet(t)
    const personal = await makePersonalKey(t, f.user)
    for (const token of [undefined, f.user.token, personal.key, `gk-${'x'.repeat(40)}`]) {
      const res = await t.req('POST', '/workers/register', { token, body: registerBody() })
      expect(res.status).toBe(401)
      expect(res.body.error.type).toBe('authentication_error')
    }
    const wid = await registerWorker(t, f.key)
    for (const token of [undefined, f.user.token, personal.key]) {
      expect(
        (await t.req('POST', `/workers/${wid}/heartbeat`, { token, body: heartbeatBody() })).status,
      ).toBe(401)
      expect((await t.req('POST', '/workers/poll', { token, body: { worker_id: wid } })).status).toBe(401)
    }
  })

  test('a revoked worker key stops registering and heartbeating on the very next request', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    const revoke = await t.req('DELETE', `/v1/orgs/${f.orgId}/api-keys/${f.keyId}`, { token: f.user.token })
    expect(revoke.status).toBe(200)
    expect((await t.req('POST', '/workers/register', { token: f.key, body: registerBody() })).status).toBe(
      401,
    )
    expect((await heartbeat(t, f.key, wid)).status).toBe(401)
  })
})

describe('POST /workers/register', () => {
  test('assigns a worker id in the key’s org and stores runtimes, GPUs and models', async () => {
    const f = await makeFleet(t)
    const res = await t.req('POST', '/workers/register', {
      token: f.key,
      body: registerBody({
        machine_id: 'm-1',
        models: ['llama3:8b'],
        runtimes: [
          {
            engine: 'ollama',
            base_url: 'http://127.0.0.1:11434',
            status: 'online',
            inventory: [inventoryItem('qwen2:7b', { sha256: `sha256:${sha('q').toUpperCase()}` })],
          },
        ],
      }),
    })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      worker_id: expect.stringMatching(/^wrk_[0-9A-Za-z]{24}$/),
      org_id: f.orgId,
      heartbeat_interval_seconds: 30,
      heartbeat_timeout_seconds: 120,
    })
    const w = await workerRow(t.deps, res.body.worker_id)
    expect(w).toMatchObject({ status: 'online', last_heartbeat_at: null, machine_id: 'm-1', key_id: f.keyId })
    expect(await gpusOf(w.id)).toHaveLength(1)
    expect(await runtimesOf(w.id)).toHaveLength(1)
    const models = await modelsOf(w.id)
    expect(models.map((m) => [m.name, m.digest, m.advertised])).toEqual([
      ['llama3:8b', null, true],
      // Digests are stored normalized: prefix stripped, lowercase.
      ['qwen2:7b', sha('q'), true],
    ])
  })

  test('bad bodies are 400 and store nothing', async () => {
    const f = await makeFleet(t)
    const bad = [
      registerBody({ extra: 1 }),
      registerBody({ runtimes: [{ engine: 'nope', base_url: 'x', status: 'online' }] }),
      registerBody({ runtimes: [{ engine: 'ollama', base_url: 'x', status: 'sleeping' }] }),
      registerBody({
        runtimes: [
          { engine: 'ollama', base_url: 'a', status: 'online' },
          { engine: 'ollama', base_url: 'b', status: 'online' },
        ],
      }),
      registerBody({
        runtimes: [
          {
            engine: 'ollama',
            base_url: 'a',
            status: 'online',
            inventory: [{ ...inventoryItem('x'), sha256: 'abc' }],
          },
        ],
      }),
      registerBody({ max_concurrent_jobs: 0 }),
      registerBody({ name: 'x'.repeat(201) }),
      { name: 'missing runtimes' },
    ]
    const before = await workerCount()
    for (const body of bad) {
      const res = await t.req('POST', '/workers/register', { token: f.key, body })
      expect(res.status).toBe(400)
      expect(res.body.error.type).toBe('invalid_request_error')
    }
    expect(await workerCount()).toEqual(before)
  })

  test('re-registration by worker_id or machine_id reuses the worker, replaces child rows and requeues its batch', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'rr:1' })
    const wid = await registerWorker(t, f.key, { machine_id: 'box-7', models: ['rr:1'] })
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('old-model')] })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    expect((await poll(t, f.key, wid))?.job_id).toBe(batch.id)

    // By machine_id (no worker_id): same worker, never-heartbeated, child rows replaced.
    const again = await t.req('POST', '/workers/register', {
      token: f.key,
      body: registerBody({ machine_id: 'box-7', models: ['new:1'], gpus: [] }),
    })
    expect(again.body.worker_id).toBe(wid)
    expect(await workerRow(t.deps, wid)).toMatchObject({
      status: 'online',
      last_heartbeat_at: null,
      vram_total_gb: null,
    })
    expect((await modelsOf(wid)).map((m) => m.name)).toEqual(['new:1'])
    expect(await gpusOf(wid)).toHaveLength(0)
    expect(await batchRow(t.deps, batch.id)).toMatchObject({
      status: 'validated',
      attempts: 1,
      error: 'worker re-registered',
    })

    // By worker_id.
    const byId = await t.req('POST', '/workers/register', {
      token: f.key,
      body: registerBody({ worker_id: wid, models: ['x:1'] }),
    })
    expect(byId.body.worker_id).toBe(wid)
    expect((await modelsOf(wid)).map((m) => m.name)).toEqual(['x:1'])
  })

  test('an unknown worker_id (e.g. after a server reset) registers a new worker', async () => {
    const f = await makeFleet(t)
    const res = await t.req('POST', '/workers/register', {
      token: f.key,
      body: registerBody({ worker_id: 'wrk_fromanolddatabase' }),
    })
    expect(res.status).toBe(200)
    expect(res.body.worker_id).not.toBe('wrk_fromanolddatabase')
    expect((await workerRow(t.deps, res.body.worker_id)).org_id).toBe(f.orgId)
  })

  test('a worker_id of another org is 403; the same machine_id in another org is another worker', async () => {
    const a = await makeFleet(t)
    const b = await makeFleet(t)
    const wid = await registerWorker(t, a.key, { machine_id: 'shared' })
    const res = await t.req('POST', '/workers/register', {
      token: b.key,
      body: registerBody({ worker_id: wid }),
    })
    expect(res.status).toBe(403)
    expect(res.body.error.type).toBe('permission_error')
    const other = await registerWorker(t, b.key, { machine_id: 'shared' })
    expect(other).not.toBe(wid)
    expect((await workerRow(t.deps, wid)).org_id).toBe(a.orgId)
  })
})

describe('POST /workers/{worker_id}/heartbeat', () => {
  test('records liveness, VRAM and activity, and answers with assigned jobs', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    t.clock.advance(10)
    const res = await heartbeat(t, f.key, wid, { activity: 'busy', vram_total_gb: 48, gpu_utilization: 87.5 })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      status: 'online',
      worker_id: wid,
      next_heartbeat_in: 30,
      assigned_job_ids: [],
      pull_models: [],
    })
    expect(await workerRow(t.deps, wid)).toMatchObject({
      activity: 'busy',
      vram_total_gb: 48,
      gpu_utilization: 87.5,
      last_heartbeat_at: t.clock.now(),
      last_seen_at: t.clock.now(),
    })
  })

  test('bad activity, negative figures and unknown fields are 400 and change nothing', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    const before = await workerRow(t.deps, wid)
    for (const o of [
      { activity: 'sleeping' },
      { vram_total_gb: -1 },
      { gpu_utilization: 140 },
      { uptime_seconds: 1.5 },
      { surprise: true },
      { inventory: [{ ...inventoryItem('x'), runtime: 'bogus' }] },
    ]) {
      const res = await heartbeat(t, f.key, wid, o)
      expect(res.status).toBe(400)
    }
    expect(await workerRow(t.deps, wid)).toEqual(before)
  })

  test('unknown worker → 404; another org’s worker → 403', async () => {
    const a = await makeFleet(t)
    const b = await makeFleet(t)
    const wid = await registerWorker(t, a.key)
    expect((await heartbeat(t, a.key, 'wrk_doesnotexist')).status).toBe(404)
    const res = await heartbeat(t, b.key, wid)
    expect(res.status).toBe(403)
    expect((await workerRow(t.deps, wid)).last_heartbeat_at).toBeNull()
  })

  test('the inventory is replaced whole each time; configured names stay; loaded flags follow', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key, { models: ['cfg:1'] })
    await heartbeat(t, f.key, wid, {
      inventory: [inventoryItem('a:1'), inventoryItem('b:1', { loaded: true })],
    })
    expect((await modelsOf(wid)).map((m) => [m.name, m.on_disk, m.loaded])).toEqual([
      ['a:1', true, false],
      ['b:1', true, true],
      ['cfg:1', false, false],
    ])
    // A model removed from disk disappears; a manually pulled one appears; loaded_models count.
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('c:1')], loaded_models: ['c:1'] })
    expect((await modelsOf(wid)).map((m) => [m.name, m.on_disk, m.loaded])).toEqual([
      ['c:1', true, true],
      ['cfg:1', false, false],
    ])
    // An older daemon omits the inventory: it stays, only loaded flags move.
    await heartbeat(t, f.key, wid, { loaded_models: [] })
    expect((await modelsOf(wid)).map((m) => [m.name, m.on_disk, m.loaded])).toEqual([
      ['c:1', true, false],
      ['cfg:1', false, false],
    ])
  })

  test('brings an offline worker back online', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    await setOffline(wid)
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    expect((await workerRow(t.deps, wid)).status).toBe('online')
  })

  test('assigned_job_ids lists what the worker holds, so a daemon can stop a job it lost', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'aj:1' })
    const wid = await registerWorker(t, f.key, { models: ['aj:1'] })
    await heartbeat(t, f.key, wid)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const job = await poll(t, f.key, wid)
    expect((await heartbeat(t, f.key, wid, { current_job_id: job!.job_id })).body.assigned_job_ids).toEqual([
      batch.id,
    ])
    await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: { worker_id: wid, job_id: batch.id, error: 'oom' },
    })
    expect((await heartbeat(t, f.key, wid, { current_job_id: job!.job_id })).body.assigned_job_ids).toEqual(
      [],
    )
  })
})

describe('pull_models (on-the-fly downloads)', () => {
  // Each case gets its own database: what "waits" and who "serves" is fleet-wide.
  const apps: ReturnType<typeof makeTestApp>[] = []
  afterAll(() => {
    for (const a of apps) a.close()
  })
  const fresh = () => {
    const a = makeTestApp()
    apps.push(a)
    return a
  }
  const downloader = (t: ReturnType<typeof makeTestApp>, f: Awaited<ReturnType<typeof makeFleet>>) =>
    registerWorker(t, f.key, { max_download_gb: 50, models: [] })

  test('an idle heartbeat while a batch waits for a model nobody hosts reads no other worker', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    // A fleet of busy-enough online workers that host other models.
    for (let i = 0; i < 20; i++) {
      const w = await registerWorker(t, f.key, { name: `other-${i}`, models: [`other:${i}`] })
      await heartbeat(t, f.key, w)
    }
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'nobody:1', size_gb: 5, vram_gb: 16 })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const w = await registerWorker(t, f.key, { max_download_gb: 10, models: [] })
    // Count what the pull check reads: the whole online fleet, or single workers.
    const fleet = t.deps.store.fleet
    const calls = { onlineWorkers: 0, findWorker: 0 }
    const { onlineWorkers, findWorker } = fleet
    fleet.onlineWorkers = (...a) => {
      calls.onlineWorkers++
      return onlineWorkers.apply(fleet, a)
    }
    fleet.findWorker = (...a) => {
      calls.findWorker++
      return findWorker.apply(fleet, a)
    }
    try {
      // Nobody serves it, so this idle worker is asked to fetch it.
      expect(
        (await heartbeat(t, f.key, w)).body.pull_models.map((p: { catalogue_id: string }) => p.catalogue_id),
      ).toEqual([entry.id])
    } finally {
      Object.assign(fleet, { onlineWorkers, findWorker })
    }
    // The worker itself is read; no other worker and never the whole fleet (docs/api.md §7 pull_models).
    expect(calls).toEqual({ onlineWorkers: 0, findWorker: 1 })
  })

  test('asks one idle, fitting worker that runs the runtime, and only one at a time', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, {
      runtime_model_id: 'pull:1',
      size_gb: 20,
      vram_gb: 16,
      digest: sha('p'),
    })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const w1 = await downloader(t, f)
    const w2 = await downloader(t, f)
    const first = await heartbeat(t, f.key, w1)
    expect(first.body.pull_models).toEqual([
      {
        catalogue_id: entry.id,
        runtime: 'ollama',
        runtime_model_id: 'pull:1',
        digest: sha('p'),
        size_gb: 20,
        vram_gb: 16,
        // Ollama pulls from its own registry: the entry's provenance, its artifact files (none).
        source_type: null,
        source_ref: null,
        source_revision: null,
        files: [],
      },
    ])
    // Another idle worker is not asked while the first one's ask is outstanding.
    expect((await heartbeat(t, f.key, w2)).body.pull_models).toEqual([])
    // The first reports failure: the ask lapses and another worker may be asked.
    await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: w1, model: 'pull:1', status: 'failed' },
    })
    expect((await heartbeat(t, f.key, w2)).body.pull_models.map((p: any) => p.catalogue_id)).toEqual([
      entry.id,
    ])
  })

  test('a worker is asked only for what fits its GPUs one by one (docs/api.md §7 Poll rule 2)', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    // 30 GB on one GPU (Ollama runs a model on one) fits no GPU of 2 × 24 GB, though 48 GB in all.
    const big = await makeCatalogEntry(t.deps, { runtime_model_id: 'pergpu:30', size_gb: 20, vram_gb: 30 })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: big.id })
    const w = await downloader(t, f)
    const gpus = [0, 1].map((index) => ({ index, memory_used_gb: 1, memory_total_gb: 24 }))
    expect((await heartbeat(t, f.key, w, { vram_total_gb: 48, gpus })).body.pull_models).toEqual([])
    const fits = await makeCatalogEntry(t.deps, { runtime_model_id: 'pergpu:20', size_gb: 20, vram_gb: 20 })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: fits.id })
    expect(
      (await heartbeat(t, f.key, w, { vram_total_gb: 48, gpus })).body.pull_models.map(
        (p: { catalogue_id: string }) => p.catalogue_id,
      ),
    ).toEqual([fits.id])
  })

  test('an ask the worker stays silent about lapses after the heartbeat timeout', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'lapse:1', size_gb: 5 })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const w1 = await downloader(t, f)
    const w2 = await downloader(t, f)
    expect((await heartbeat(t, f.key, w1)).body.pull_models).toHaveLength(1)
    t.clock.advance(60)
    await heartbeat(t, f.key, w1, { activity: 'downloading_model' })
    expect((await heartbeat(t, f.key, w2)).body.pull_models).toEqual([])
    // Download progress keeps the ask alive; silence about it for the timeout lets it lapse.
    await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: w1, model: 'lapse:1', status: 'downloading', completed_bytes: 1 },
    })
    t.clock.advance(100)
    expect((await heartbeat(t, f.key, w2)).body.pull_models).toEqual([])
    t.clock.advance(30)
    expect((await heartbeat(t, f.key, w2)).body.pull_models.map((p: any) => p.catalogue_id)).toEqual([
      entry.id,
    ])
  })

  test('never asks when nothing waits, when an online worker serves it, or when the worker is unfit', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    // An entry nothing waits for.
    await makeCatalogEntry(t.deps, { runtime_model_id: 'nowait:1', size_gb: 5 })
    const served = await makeCatalogEntry(t.deps, { runtime_model_id: 'served:1', size_gb: 5 })
    const big = await makeCatalogEntry(t.deps, { runtime_model_id: 'big:1', size_gb: 80 })
    const heavy = await makeCatalogEntry(t.deps, { runtime_model_id: 'heavy:1', size_gb: 5, vram_gb: 80 })
    const vllm = await makeCatalogEntry(t.deps, {
      runtime: 'vllm',
      runtime_model_id: 'org/vllm-only',
      size_gb: 5,
    })
    const off = await makeCatalogEntry(t.deps, { runtime_model_id: 'off:1', size_gb: 5, enabled: false })
    for (const e of [served, big, heavy, vllm, off])
      await makeValidatedBatch(t.deps, { userId: f.user.id, model: e.id })
    const host = await registerWorker(t, f.key, { models: ['served:1'] })
    await heartbeat(t, f.key, host)
    const wid = await downloader(t, f)
    const res = await heartbeat(t, f.key, wid)
    expect(res.body.pull_models).toEqual([])
    // A worker that is busy, or whose max_download_gb is 0 (the default), is never asked either.
    const later = await makeCatalogEntry(t.deps, { runtime_model_id: 'fresh:1', size_gb: 5 })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: later.id })
    expect((await heartbeat(t, f.key, wid, { activity: 'busy' })).body.pull_models).toEqual([])
    const noDownloads = await registerWorker(t, f.key)
    expect((await heartbeat(t, f.key, noDownloads)).body.pull_models).toEqual([])
    expect((await heartbeat(t, f.key, wid)).body.pull_models.map((p: any) => p.catalogue_id)).toEqual([
      later.id,
    ])
  })

  describe('a runtime that downloads from a model hub (docs/api.md §7 pull_models)', () => {
    const llamaWorker = (t: ReturnType<typeof makeTestApp>, f: Awaited<ReturnType<typeof makeFleet>>) =>
      registerWorker(t, f.key, {
        max_download_gb: 50,
        models: [],
        runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8080', status: 'online' }],
      })
    const asked = async (t: ReturnType<typeof makeTestApp>, key: string, wid: string) =>
      (await heartbeat(t, key, wid)).body.pull_models

    test('an entry with artifact files is asked with its repository, revision and every file', async () => {
      const t = fresh()
      const f = await makeFleet(t)
      const entry = await makeCatalogEntry(t.deps, {
        profiles: [
          { runtime: 'ollama', runtime_model_id: 'vis:1' },
          { runtime: 'llama.cpp', runtime_model_id: 'vis-q4_k_m' },
        ],
        size_gb: 3,
        vram_gb: 6,
        source_type: 'huggingface',
        source_ref: 'owner/vis-GGUF',
        source_revision: 'v2',
        artifact_files: [
          { path: 'vis-Q4_K_M.gguf', sha256: sha('w'), size_bytes: 2_000 },
          { path: 'mmproj/mmproj-vis-F16.gguf', sha256: `sha256:${sha('m')}`, size_bytes: 500 },
        ],
      })
      await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
      expect(await asked(t, f.key, await llamaWorker(t, f))).toEqual([
        {
          catalogue_id: entry.id,
          runtime: 'llama.cpp',
          runtime_model_id: 'vis-q4_k_m',
          digest: null,
          size_gb: 3,
          vram_gb: 6,
          source_type: 'huggingface',
          source_ref: 'owner/vis-GGUF',
          source_revision: 'v2',
          files: [
            { path: 'vis-Q4_K_M.gguf', sha256: sha('w'), size_bytes: 2_000 },
            { path: 'mmproj/mmproj-vis-F16.gguf', sha256: sha('m'), size_bytes: 500 },
          ],
        },
      ])
    })

    test('a single-file entry names its file after the repository id; the revision defaults to main', async () => {
      const t = fresh()
      const f = await makeFleet(t)
      const entry = await makeCatalogEntry(t.deps, {
        runtime: 'llama.cpp',
        runtime_model_id: 'tiny-q8_0',
        digest: sha('tiny'),
        size_gb: 1,
        source_type: 'huggingface',
        source_ref: 'owner/tiny-GGUF/quants/tiny-Q8_0.gguf',
      })
      await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
      expect(await asked(t, f.key, await llamaWorker(t, f))).toMatchObject([
        {
          catalogue_id: entry.id,
          runtime_model_id: 'tiny-q8_0',
          digest: sha('tiny'),
          source_type: 'huggingface',
          source_ref: 'owner/tiny-GGUF',
          source_revision: 'main',
          files: [{ path: 'quants/tiny-Q8_0.gguf', sha256: sha('tiny'), size_bytes: null }],
        },
      ])
    })

    test('an entry the runtime cannot fetch is never asked for; a fetchable one after it is', async () => {
      const t = fresh()
      const f = await makeFleet(t)
      const cannot = [
        // Ollama's registry only: no hub source.
        { source_type: 'ollama', source_ref: 'registry.ollama.ai/library/x:1' },
        // A hub repository without files or digest: nothing to verify.
        { source_type: 'huggingface', source_ref: 'owner/repo' },
        // A file named in the ref but no digest to check it against.
        { source_type: 'huggingface', source_ref: 'owner/repo/model.gguf' },
        // Artifact files, but a ref that is not a repository id.
        {
          source_type: 'huggingface',
          source_ref: 'owner/repo/sub',
          artifact_files: [{ path: 'a.gguf', sha256: sha('a') }],
        },
        // A path that would leave the models directory.
        {
          source_type: 'huggingface',
          source_ref: 'owner/repo',
          artifact_files: [{ path: '../escape.gguf', sha256: sha('e') }],
        },
        { source_type: 'huggingface', source_ref: '../repo/model.gguf', digest: sha('d') },
      ]
      for (const [i, o] of cannot.entries()) {
        const e = await makeCatalogEntry(t.deps, {
          runtime: 'llama.cpp',
          runtime_model_id: `cannot-${i}`,
          size_gb: 1,
          ...o,
        })
        await makeValidatedBatch(t.deps, { userId: f.user.id, model: e.id })
      }
      const can = await makeCatalogEntry(t.deps, {
        runtime: 'llama.cpp',
        runtime_model_id: 'can',
        size_gb: 1,
        digest: sha('can'),
        source_type: 'huggingface',
        source_ref: 'owner/repo/can.gguf',
      })
      await makeValidatedBatch(t.deps, { userId: f.user.id, model: can.id })
      const wid = await llamaWorker(t, f)
      expect((await asked(t, f.key, wid)).map((p: { catalogue_id: string }) => p.catalogue_id)).toEqual([
        can.id,
      ])
      // While that ask is outstanding the worker is asked for nothing else.
      expect(await asked(t, f.key, wid)).toEqual([])
    })

    test('the rules that hold for Ollama hold here: size cap, VRAM fit, one worker per entry', async () => {
      const t = fresh()
      const f = await makeFleet(t)
      const hub = { source_type: 'huggingface', source_ref: 'owner/repo/m.gguf', runtime: 'llama.cpp' }
      const big = await makeCatalogEntry(t.deps, {
        ...hub,
        runtime_model_id: 'big',
        digest: sha('big'),
        size_gb: 80,
      })
      const heavy = await makeCatalogEntry(t.deps, {
        ...hub,
        runtime_model_id: 'heavy',
        digest: sha('heavy'),
        vram_gb: 80,
      })
      const fits = await makeCatalogEntry(t.deps, { ...hub, runtime_model_id: 'fits', digest: sha('fits') })
      for (const e of [big, heavy, fits]) await makeValidatedBatch(t.deps, { userId: f.user.id, model: e.id })
      const w1 = await llamaWorker(t, f)
      const w2 = await llamaWorker(t, f)
      expect((await asked(t, f.key, w1)).map((p: { catalogue_id: string }) => p.catalogue_id)).toEqual([
        fits.id,
      ])
      expect(await asked(t, f.key, w2)).toEqual([])
    })
  })
})
