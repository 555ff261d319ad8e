import { afterAll, describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { type CatalogueEntry, matchEntry, type WorkerView } from '../../src/domain/matching'
import { digestOrNull } from '../../src/lib/digest'
import { servableCatalogIds } from '../../src/modules/workers/matching'
import { makeTestApp } from '../helpers/app'
import { rowsOf } from '../helpers/rows'
import {
  batchRow,
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
  sha,
} from '../helpers/workers'

const t = makeTestApp()
afterAll(() => t.close())

/** A heartbeated worker (24 GB) hosting `names` through the ollama inventory. */
async function hostWorker(
  f: Awaited<ReturnType<typeof makeFleet>>,
  names: string[],
  o: Record<string, unknown> = {},
) {
  const wid = await registerWorker(t, f.key)
  const hb = await heartbeat(t, f.key, wid, { inventory: names.map((n) => inventoryItem(n)), ...o })
  expect(hb.status).toBe(200)
  return wid
}

describe('POST /workers/poll', () => {
  test('claims a compatible batch: input_path, runtime string (not slug), assignment', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'claim:7b', digest: sha('claim:7b') })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, requests: 4 })
    const wid = await hostWorker(f, ['claim:7b'])
    const job = await poll(t, f.key, wid)
    expect(job).toEqual({
      job_id: batch.id,
      assignment_id: expect.stringMatching(/^asg_/),
      input_file_id: batch.input_file_id,
      input_path: `/v1/files/${batch.input_file_id}/content`,
      model: 'claim:7b',
      catalogue_id: entry.id,
      endpoint: '/v1/chat/completions',
      runtime: 'ollama',
      digest: sha('claim:7b'),
      params: {},
      vram_gb: entry.vram_gb,
      total_requests: 4,
    })
    expect(await batchRow(t.deps, batch.id)).toMatchObject({
      status: 'in_progress',
      in_progress_at: t.clock.now(),
    })
    const claims = (await t.deps.metrics.claims.get()).values[0]!.value
    expect(await poll(t, f.key, wid)).toBeNull()
    expect((await t.deps.metrics.claims.get()).values[0]!.value).toBe(claims)
    expect(claims).toBeGreaterThanOrEqual(1)
  })

  test('unknown worker → 404, another org’s worker → 403, bad body → 400', async () => {
    const a = await makeFleet(t)
    const b = await makeFleet(t)
    const wid = await registerWorker(t, a.key)
    expect(
      (await t.req('POST', '/workers/poll', { token: a.key, body: { worker_id: 'wrk_nope' } })).status,
    ).toBe(404)
    expect((await t.req('POST', '/workers/poll', { token: b.key, body: { worker_id: wid } })).status).toBe(
      403,
    )
    expect((await t.req('POST', '/workers/poll', { token: a.key, body: {} })).status).toBe(400)
    expect(
      (await t.req('POST', '/workers/poll', { token: a.key, body: { worker_id: wid, x: 1 } })).status,
    ).toBe(400)
  })

  test('max_concurrent_jobs is honoured', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'conc:1' })
    for (let i = 0; i < 3; i++) await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const wid = await registerWorker(t, f.key, { max_concurrent_jobs: 2, models: ['conc:1'] })
    expect(await poll(t, f.key, wid)).not.toBeNull()
    expect(await poll(t, f.key, wid)).not.toBeNull()
    expect(await poll(t, f.key, wid)).toBeNull()
  })

  test('a worker silent past the timeout gets no job until it heartbeats again', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'silent:1' })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const wid = await hostWorker(f, ['silent:1'])
    t.clock.advance(121)
    expect(await poll(t, f.key, wid)).toBeNull()
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('silent:1')] })
    expect(await poll(t, f.key, wid)).not.toBeNull()
  })
})

describe('docs/api.md §7 Poll rules rules', () => {
  test('rule 1: a batch whose model is not catalogued, or whose entry is disabled, is skipped', async () => {
    const f = await makeFleet(t)
    const disabled = await makeCatalogEntry(t.deps, { runtime_model_id: 'r1:off', enabled: false })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: disabled.id })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: 'r1:off' }) // a raw runtime string, not an id
    const wid = await hostWorker(f, ['r1:off'])
    expect(await poll(t, f.key, wid)).toBeNull()
  })

  test('rule 1 with a one-shot rename: a batch stored with the old slug still resolves', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, {
      id: 'renamed-new-q4km',
      renamed_from: 'renamed-old',
      runtime_model_id: 'ren:1',
    })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: 'renamed-old' })
    const wid = await hostWorker(f, ['ren:1'])
    const job = await poll(t, f.key, wid)
    expect(job).toMatchObject({ job_id: batch.id, catalogue_id: entry.id, model: 'ren:1' })
  })

  test('rule 2: once heartbeated, the worker must fit vram_gb; a null vram_gb disables the filter', async () => {
    const f = await makeFleet(t)
    const heavy = await makeCatalogEntry(t.deps, { runtime_model_id: 'r2:heavy', vram_gb: 32 })
    const anySize = await makeCatalogEntry(t.deps, { runtime_model_id: 'r2:any', vram_gb: null })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: heavy.id })
    const nullBatch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: anySize.id })
    const small = await hostWorker(f, ['r2:heavy', 'r2:any'], { vram_total_gb: 24 })
    expect((await poll(t, f.key, small))?.job_id).toBe(nullBatch.id)
    const big = await hostWorker(f, ['r2:heavy'], { vram_total_gb: 48 })
    expect((await poll(t, f.key, big))?.catalogue_id).toBe(heavy.id)
  })

  test('rule 2 per GPU: each of the GPUs its profile runs on must hold its share; the total does not do', async () => {
    const f = await makeFleet(t)
    const vllm = (name: string, params: Record<string, unknown>) =>
      makeCatalogEntry(t.deps, {
        runtime_model_id: name,
        vram_gb: 30,
        profiles: [{ runtime: 'vllm', runtime_model_id: name, params }],
      })
    const one = await vllm('pergpu:one', {})
    const two = await vllm('pergpu:two', { tensor_parallel_size: 2 })
    const oneBatch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: one.id })
    const twoBatch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: two.id })
    const gpus = [0, 1].map((index) => ({ index, memory_used_gb: 1, memory_total_gb: 24 }))
    const wid = await registerWorker(t, f.key, {
      runtimes: [{ engine: 'vllm', base_url: 'http://127.0.0.1:8000', status: 'online' }],
    })
    const hb = await heartbeat(t, f.key, wid, {
      vram_total_gb: 48,
      gpus,
      inventory: ['pergpu:one', 'pergpu:two'].map((n) => inventoryItem(n, { runtime: 'vllm' })),
    })
    expect(hb.status).toBe(200)
    // 30 GB over two GPUs (15 each) fits 2 × 24 GB; on one GPU it does not, though 48 GB in all.
    expect((await poll(t, f.key, wid))?.job_id).toBe(twoBatch.id)
    expect(await poll(t, f.key, wid)).toBeNull()
    expect(await servableCatalogIds(t.deps)).toContain(two.id)
    expect(await servableCatalogIds(t.deps)).not.toContain(one.id)
    const waiting = await t.req('GET', `/v1/batches/${oneBatch.id}`, { token: f.user.token })
    expect(waiting.body.waiting.reason).toBe('no_fit')
  })

  test('rule 2: before its first heartbeat the VRAM filter is not applied', async () => {
    const f = await makeFleet(t)
    const heavy = await makeCatalogEntry(t.deps, { runtime_model_id: 'r2b:heavy', vram_gb: 500 })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: heavy.id })
    const wid = await registerWorker(t, f.key, { models: ['r2b:heavy'] })
    expect((await poll(t, f.key, wid))?.job_id).toBe(batch.id)
  })

  test('rule 3: the worker must host the runtime string — registration models, inventory or loaded_models', async () => {
    const f = await makeFleet(t)
    const viaModels = await makeCatalogEntry(t.deps, { runtime_model_id: 'r3:models' })
    const viaInventory = await makeCatalogEntry(t.deps, { runtime_model_id: 'r3:inv' })
    const viaLoaded = await makeCatalogEntry(t.deps, { runtime_model_id: 'r3:loaded' })
    const notHosted = await makeCatalogEntry(t.deps, { runtime_model_id: 'r3:absent' })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: notHosted.id })
    const wid = await registerWorker(t, f.key, { models: ['r3:models'], max_concurrent_jobs: 10 })
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('r3:inv')], loaded_models: ['r3:loaded'] })
    const want: string[] = []
    for (const e of [viaModels, viaInventory, viaLoaded]) {
      want.push((await makeValidatedBatch(t.deps, { userId: f.user.id, model: e.id })).id)
    }
    const got: string[] = []
    for (let i = 0; i < 4; i++) {
      const job = await poll(t, f.key, wid)
      if (job) got.push(job.job_id)
    }
    expect(got.sort()).toEqual(want.sort())
  })

  test('rule 4: same tag with a different digest does not match; equal digests match whatever the prefix or case', async () => {
    const f = await makeFleet(t)
    const pinned = await makeCatalogEntry(t.deps, {
      runtime_model_id: 'r4:tag',
      digest: `sha256:${sha('right').toUpperCase()}`,
    })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: pinned.id })
    const wrong = await hostWorker(f, [])
    await heartbeat(t, f.key, wrong, { inventory: [inventoryItem('r4:tag', { sha256: sha('wrong') })] })
    expect(await poll(t, f.key, wrong)).toBeNull()
    const right = await registerWorker(t, f.key)
    await heartbeat(t, f.key, right, { inventory: [inventoryItem('r4:tag', { sha256: sha('right') })] })
    expect((await poll(t, f.key, right))?.job_id).toBe(batch.id)
  })

  test('rule 4: when either side has no digest, the name decides', async () => {
    const f = await makeFleet(t)
    const unpinned = await makeCatalogEntry(t.deps, { runtime_model_id: 'r4b:any', digest: null })
    const pinned = await makeCatalogEntry(t.deps, { runtime_model_id: 'r4b:pinned', digest: sha('r4b') })
    const b1 = await makeValidatedBatch(t.deps, { userId: f.user.id, model: unpinned.id })
    const b2 = await makeValidatedBatch(t.deps, { userId: f.user.id, model: pinned.id })
    const wid = await registerWorker(t, f.key, { models: ['r4b:pinned'], max_concurrent_jobs: 2 })
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('r4b:any', { sha256: sha('whatever') })] })
    const got = [(await poll(t, f.key, wid))?.job_id, (await poll(t, f.key, wid))?.job_id]
    expect(got.sort()).toEqual([b1.id, b2.id].sort())
  })

  test('rule 5: batches of a model loaded on the worker come first', async () => {
    const f = await makeFleet(t)
    const cold = await makeCatalogEntry(t.deps, { runtime_model_id: 'r5:cold' })
    const hot = await makeCatalogEntry(t.deps, { runtime_model_id: 'r5:hot' })
    const older = await makeValidatedBatch(t.deps, { userId: f.user.id, model: cold.id })
    const newer = await makeValidatedBatch(t.deps, { userId: f.user.id, model: hot.id })
    const wid = await registerWorker(t, f.key, { max_concurrent_jobs: 2 })
    await heartbeat(t, f.key, wid, {
      inventory: [inventoryItem('r5:cold'), inventoryItem('r5:hot', { loaded: true })],
    })
    expect((await poll(t, f.key, wid))?.job_id).toBe(newer.id)
    expect((await poll(t, f.key, wid))?.job_id).toBe(older.id)
  })

  test('then oldest first', async () => {
    const f = await makeFleet(t)
    const a = await makeCatalogEntry(t.deps, { runtime_model_id: 'old:a' })
    const b = await makeCatalogEntry(t.deps, { runtime_model_id: 'old:b' })
    const first = await makeValidatedBatch(t.deps, { userId: f.user.id, model: b.id })
    const second = await makeValidatedBatch(t.deps, { userId: f.user.id, model: a.id })
    const third = await makeValidatedBatch(t.deps, { userId: f.user.id, model: b.id })
    const wid = await registerWorker(t, f.key, { models: ['old:a', 'old:b'], max_concurrent_jobs: 3 })
    const order = [await poll(t, f.key, wid), await poll(t, f.key, wid), await poll(t, f.key, wid)].map(
      (j) => j?.job_id,
    )
    expect(order).toEqual([first.id, second.id, third.id])
  })

  test('rule 6: a worker that never heartbeated only gets models it advertised at registration', async () => {
    const f = await makeFleet(t)
    const advertised = await makeCatalogEntry(t.deps, { runtime_model_id: 'r6:adv' })
    const later = await makeCatalogEntry(t.deps, { runtime_model_id: 'r6:later' })
    const wid = await registerWorker(t, f.key, {
      models: ['r6:adv'],
      machine_id: 'r6-box',
      max_concurrent_jobs: 5,
    })
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('r6:later')] })
    // Re-registration makes it never-heartbeated again, advertising only r6:adv.
    await registerWorker(t, f.key, { models: ['r6:adv'], machine_id: 'r6-box', max_concurrent_jobs: 5 })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: later.id })
    const adv = await makeValidatedBatch(t.deps, { userId: f.user.id, model: advertised.id })
    expect((await poll(t, f.key, wid))?.job_id).toBe(adv.id)
    expect(await poll(t, f.key, wid)).toBeNull()
  })

  test('serving profiles: any profile matches; the one whose runtime hosts the model wins', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, {
      runtime: 'vllm',
      runtime_model_id: 'org/sp-model',
      profiles: [
        { runtime: 'vllm', runtime_model_id: 'org/sp-model', params: { max_model_len: 8192 } },
        { runtime: 'ollama', runtime_model_id: 'sp-model:q4', params: { num_ctx: 8192 } },
        { runtime: 'llama.cpp', runtime_model_id: 'sp-model:q4', params: { n_ctx: 4096 } },
      ],
    })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    // Hosted by ollama (inventory runtime): the ollama profile wins over llama.cpp with the same string.
    const ollama = await hostWorker(f, ['sp-model:q4'])
    expect(await poll(t, f.key, ollama)).toMatchObject({
      model: 'sp-model:q4',
      runtime: 'ollama',
      params: { num_ctx: 8192 },
    })
    const vllm = await registerWorker(t, f.key, {
      runtimes: [{ engine: 'vllm', base_url: 'http://127.0.0.1:8000', status: 'online' }],
      models: ['org/sp-model'],
    })
    expect(await poll(t, f.key, vllm)).toMatchObject({
      model: 'org/sp-model',
      runtime: 'vllm',
      params: { max_model_len: 8192 },
    })
  })

  test('artifact files: every file’s sha256 must be in the inventory', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, {
      runtime_model_id: 'vis:1',
      artifact_files: [
        { path: 'model.gguf', sha256: sha('weights') },
        { path: 'mmproj.gguf', sha256: `SHA256:${sha('proj').toUpperCase()}` },
      ],
    })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const partial = await registerWorker(t, f.key)
    await heartbeat(t, f.key, partial, { inventory: [inventoryItem('vis:1', { sha256: sha('weights') })] })
    expect(await poll(t, f.key, partial)).toBeNull()
    const full = await registerWorker(t, f.key)
    await heartbeat(t, f.key, full, {
      inventory: [
        inventoryItem('vis:1', { sha256: sha('weights') }),
        inventoryItem('vis-proj', { sha256: sha('proj') }),
      ],
    })
    expect((await poll(t, f.key, full))?.job_id).toBe(batch.id)
  })

  test('org-private entries run only on that org’s workers', async () => {
    const owner = await makeFleet(t)
    const other = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'priv:1', org_id: owner.orgId })
    const batch = await makeValidatedBatch(t.deps, { userId: owner.user.id, model: entry.id })
    expect(await poll(t, other.key, await hostWorker(other, ['priv:1']))).toBeNull()
    expect((await poll(t, owner.key, await hostWorker(owner, ['priv:1'])))?.job_id).toBe(batch.id)
  })
})

describe('the predicate itself', () => {
  const entry = (o: Partial<CatalogueEntry> = {}): CatalogueEntry => ({
    id: 'e-q4km',
    renamed_from: null,
    enabled: true,
    org_id: null,
    display_name: 'E',
    parameter_size: null,
    vram_gb: 8,
    size_gb: 4,
    digest: null,
    profiles: [{ runtime: 'ollama', runtime_model_id: 'e:1', params: {} }],
    artifact_sha256: [],
    capabilities: [],
    artifact_files: [],
    source_type: null,
    source_ref: null,
    source_revision: null,
    ...o,
  })
  const view = (o: Partial<WorkerView> = {}): WorkerView => ({
    org_id: 'org_x',
    heartbeated: true,
    vram_total_gb: 24,
    gpus_gb: [],
    engines: ['ollama'],
    reported: {},
    models: [
      {
        name: 'e:1',
        runtime: 'ollama',
        digest: null,
        loaded: false,
        advertised: false,
        configured: false,
        on_disk: true,
      },
    ],
    ...o,
  })

  test('rule 6: rows not advertised at registration do not count before the first heartbeat', () => {
    expect(matchEntry(view(), entry())).not.toBeNull()
    expect(matchEntry(view({ heartbeated: false }), entry())).toBeNull()
  })

  test('rule 2: a heartbeated worker that never reported VRAM does not fit a VRAM requirement', () => {
    expect(matchEntry(view({ vram_total_gb: null }), entry())).toBeNull()
    expect(matchEntry(view({ vram_total_gb: null }), entry({ vram_gb: null }))).not.toBeNull()
  })

  test('rule 2 per GPU: its GPU count from the profile it would run; llama.cpp splits over as many as it needs', () => {
    const on = (runtime: string, params: Record<string, unknown> = {}) =>
      entry({ vram_gb: 30, profiles: [{ runtime, runtime_model_id: 'e:1', params }] })
    const host = (runtime: string, gpus_gb: number[]) =>
      view({
        engines: [runtime],
        gpus_gb,
        vram_total_gb: gpus_gb.reduce((a, b) => a + b, 0),
        models: [{ ...view().models[0]!, runtime }],
      })
    const two24 = (runtime: string) => host(runtime, [24, 24])
    expect(matchEntry(two24('vllm'), on('vllm'))).toBeNull()
    expect(matchEntry(two24('vllm'), on('vllm', { tensor_parallel_size: 2 }))).not.toBeNull()
    expect(matchEntry(two24('vllm'), on('vllm', { pipeline_parallel_size: 2 }))).not.toBeNull()
    expect(matchEntry(two24('vllm'), on('vllm', { tensor_parallel_size: 4 }))).toBeNull()
    expect(matchEntry(two24('sglang'), on('sglang'))).toBeNull()
    expect(matchEntry(two24('sglang'), on('sglang', { tp_size: 2 }))).not.toBeNull()
    expect(matchEntry(two24('ollama'), on('ollama'))).toBeNull()
    expect(matchEntry(two24('llama.cpp'), on('llama.cpp'))).not.toBeNull()
    // Three of 12 GB: llama.cpp splits over all three (10 each); two of them (15 each) would not do.
    expect(matchEntry(host('llama.cpp', [12, 12, 12]), on('llama.cpp'))).not.toBeNull()
    expect(matchEntry(host('vllm', [12, 12, 12]), on('vllm', { tensor_parallel_size: 2 }))).toBeNull()
    // One GPU large enough: fits on its own.
    expect(matchEntry(host('vllm', [80]), on('vllm'))).not.toBeNull()
    // No GPU reported one by one: the total decides, as before.
    expect(
      matchEntry(
        view({
          gpus_gb: [],
          vram_total_gb: 48,
          engines: ['vllm'],
          models: [{ ...view().models[0]!, runtime: 'vllm' }],
        }),
        on('vllm'),
      ),
    ).not.toBeNull()
  })

  test('rule 7: what a worker can do with an entry is the model’s capabilities AND its hosting engine’s', () => {
    const model = entry({ capabilities: ['json_mode', 'vision', 'logprobs'] })
    // Nothing reported: the engine's defaults (docs/api.md §7: ollama can do all four).
    expect(matchEntry(view(), model)?.capabilities).toEqual(['json_mode', 'vision', 'logprobs'])
    // What the runtime reports wins over its defaults, key by key.
    expect(
      matchEntry(view({ reported: { ollama: { vision: false, embeddings: true } } }), model)?.capabilities,
    ).toEqual(['json_mode', 'logprobs'])
    // The engine hosting the model decides, not another runtime of the worker: here tgi hosts it.
    const onTgi = view({
      engines: ['ollama', 'tgi'],
      reported: { tgi: { json_mode: false } },
      models: [{ ...view().models[0]!, runtime: 'tgi' }],
    })
    expect(matchEntry(onTgi, model)?.capabilities).toEqual(['vision', 'logprobs'])
    // A model hosted by name only, on an engine the worker does not run: what all its runtimes share.
    const unknown = view({
      engines: ['ollama', 'lmstudio'],
      models: [{ ...view().models[0]!, runtime: null }],
      reported: {},
    })
    expect(
      matchEntry(
        unknown,
        entry({ ...model, profiles: [{ runtime: 'vllm', runtime_model_id: 'e:1', params: {} }] }),
      )?.capabilities,
    ).toEqual(['json_mode', 'vision'])
    // A model that cannot do a thing does not gain it from the engine.
    expect(matchEntry(view(), entry())?.capabilities).toEqual([])
  })

  test('digests are normalized', () => {
    expect(digestOrNull(`sha256:${'AB'.repeat(32)}`)).toBe('ab'.repeat(32))
    expect(digestOrNull('')).toBeNull()
    expect(digestOrNull(null)).toBeNull()
  })
})

describe('servableCatalogIds', () => {
  test('counts only online workers that can serve the entry', async () => {
    const s = makeTestApp()
    try {
      const f = await makeFleet(s)
      const served = await makeCatalogEntry(s.deps, { runtime_model_id: 'sv:1' })
      const tooBig = await makeCatalogEntry(s.deps, { runtime_model_id: 'sv:big', vram_gb: 100 })
      const offline = await makeCatalogEntry(s.deps, { runtime_model_id: 'sv:off' })
      await makeCatalogEntry(s.deps, { runtime_model_id: 'sv:1', id: 'sv-disabled-q4km', enabled: false })
      const a = await registerWorker(s, f.key)
      await heartbeat(s, f.key, a, { inventory: [inventoryItem('sv:1'), inventoryItem('sv:big')] })
      const b = await registerWorker(s, f.key, { models: ['sv:off'] })
      const { db, tables } = rowsOf(s.deps)
      await db.update(tables.workers).set({ status: 'offline' }).where(eq(tables.workers.id, b))
      expect([...(await servableCatalogIds(s.deps))]).toEqual([served.id])
      // Read-time cutoff: a worker silent past the timeout serves nothing, even if stored online.
      s.clock.advance(120)
      expect([...(await servableCatalogIds(s.deps))]).toEqual([])
      void tooBig
      void offline
    } finally {
      s.close()
    }
  })
})
