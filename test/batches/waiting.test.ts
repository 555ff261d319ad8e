import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makeSuperadmin, makeUser } from '../helpers/builders'
import {
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §6 `waiting`: why a validated batch is not claimed yet, as GET /v1/batches/{id} and
// GET /v1/batches show it, on either engine. Each test has its own model, so one test's workers
// never serve another's batches.

const t = makeTestApp()
afterAll(() => t.close())

const waitingOf = async (token: string, id: string) => {
  const res = await t.req('GET', `/v1/batches/${id}`, { token })
  expect(res.status).toBe(200)
  return res.body.waiting
}

describe('no worker can serve it', () => {
  test('no_worker: nothing registered it; then its only host goes offline', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'nw:1' })
    const f = await makeFleet(t)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    expect(await waitingOf(f.user.token, batch.id)).toEqual({
      reason: 'no_worker',
      message: `No online worker hosts ${entry.id}; no worker has registered it.`,
      details: { offline_workers: 0 },
    })

    const wid = await registerWorker(t, f.key, { name: 'nw-box', models: ['nw:1'] })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    expect((await waitingOf(f.user.token, batch.id)).reason).toBe('queued')

    // Silent past the heartbeat timeout: offline when read (docs/api.md §7), though still stored online.
    t.clock.advance(t.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
    expect(await waitingOf(f.user.token, batch.id)).toEqual({
      reason: 'no_worker',
      message: `No online worker hosts ${entry.id}; 1 worker that hosts it is offline.`,
      details: { offline_workers: 1 },
    })
  })

  test('no_fit: its host has less VRAM than the entry needs', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'fit:70b', vram_gb: 80 })
    const f = await makeFleet(t)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const wid = await registerWorker(t, f.key, { models: ['fit:70b'] })
    expect((await heartbeat(t, f.key, wid, { vram_total_gb: 24 })).status).toBe(200)
    expect(await waitingOf(f.user.token, batch.id)).toEqual({
      reason: 'no_fit',
      message: `1 online worker hosts ${entry.id}, but none has the 80 GB of VRAM it needs.`,
      details: { vram_gb: 80, workers: 1 },
    })
    // A worker hosting another model is no host of this one.
    const other = await registerWorker(t, f.key, { models: ['fit:other'] })
    expect((await heartbeat(t, f.key, other, { vram_total_gb: 96 })).status).toBe(200)
    expect((await waitingOf(f.user.token, batch.id)).reason).toBe('no_fit')
    // The same host reporting enough VRAM serves it.
    expect((await heartbeat(t, f.key, wid, { vram_total_gb: 96 })).status).toBe(200)
    expect((await waitingOf(f.user.token, batch.id)).reason).toBe('queued')
  })

  test('no_fit per GPU: a host of 2 × 24 GB does not fit 30 GB on one GPU, though 48 GB in all', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'fit:30b-one-gpu', vram_gb: 30 })
    const f = await makeFleet(t)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const wid = await registerWorker(t, f.key, { models: ['fit:30b-one-gpu'] })
    const gpu = (index: number, total: number) => ({ index, memory_used_gb: 0, memory_total_gb: total })
    expect(
      (await heartbeat(t, f.key, wid, { vram_total_gb: 48, gpus: [gpu(0, 24), gpu(1, 24)] })).status,
    ).toBe(200)
    expect(await waitingOf(f.user.token, batch.id)).toEqual({
      reason: 'no_fit',
      message: `1 online worker hosts ${entry.id}, but none has GPUs that hold the 30 GB of VRAM it needs.`,
      details: { vram_gb: 30, workers: 1 },
    })
    // One GPU of 40 GB holds it.
    expect(
      (await heartbeat(t, f.key, wid, { vram_total_gb: 64, gpus: [gpu(0, 24), gpu(1, 40)] })).status,
    ).toBe(200)
    expect((await waitingOf(f.user.token, batch.id)).reason).toBe('queued')
  })

  test('not_in_catalogue: the entry was disabled after validation', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'gone:1' })
    const f = await makeFleet(t)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    await makeCatalogEntry(t.deps, { id: entry.id, runtime_model_id: 'gone:1', enabled: false })
    expect(await waitingOf(f.user.token, batch.id)).toEqual({
      reason: 'not_in_catalogue',
      message: `${entry.id} is not an enabled catalogue model now; no worker takes this batch until an administrator enables it again.`,
      details: {},
    })
  })
})

describe('a worker is getting it ready', () => {
  test('downloading: the pull_models ask and its bytes (model-progress), the worker named to its org only', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'dl-w:1', size_gb: 1 })
    const f = await makeFleet(t)
    const stranger = await makeUser(t)
    const admin = await makeSuperadmin(t)
    const own = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const theirs = await makeValidatedBatch(t.deps, { userId: stranger.id, model: entry.id })
    // Only this test's entry is small enough for it to download (the others need 5 GB).
    const wid = await registerWorker(t, f.key, { name: 'dl-box', max_download_gb: 1 })
    const beat = await heartbeat(t, f.key, wid)
    expect(beat.body.pull_models.map((p: { catalogue_id: string }) => p.catalogue_id)).toEqual([entry.id])

    // Asked, nothing reported yet.
    expect(await waitingOf(f.user.token, own.id)).toEqual({
      reason: 'downloading',
      message: `Worker dl-box is downloading ${entry.id}: no progress reported yet.`,
      details: { worker_name: 'dl-box', status: 'downloading', completed_bytes: null, total_bytes: null },
    })
    const progress = await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: {
        worker_id: wid,
        model: 'dl-w:1',
        status: 'downloading',
        completed_bytes: 1_200_000_000,
        total_bytes: 4_000_000_000,
      },
    })
    expect(progress.status).toBe(200)
    const details = {
      status: 'downloading',
      completed_bytes: 1_200_000_000,
      total_bytes: 4_000_000_000,
    }
    expect(await waitingOf(f.user.token, own.id)).toEqual({
      reason: 'downloading',
      message: `Worker dl-box is downloading ${entry.id}: 1.2 GB of 4.0 GB.`,
      details: { worker_name: 'dl-box', ...details },
    })
    // docs/api.md §6 Names: someone outside the worker's org learns the bytes, never the name.
    const hidden = await waitingOf(stranger.token, theirs.id)
    expect(hidden).toEqual({
      reason: 'downloading',
      message: `A worker is downloading ${entry.id}: 1.2 GB of 4.0 GB.`,
      details: { worker_name: null, ...details },
    })
    expect(JSON.stringify(hidden)).not.toContain(wid)
    expect(JSON.stringify(hidden)).not.toContain(f.orgId)
    // A superadmin sees every name, on anyone's batch.
    expect((await waitingOf(admin.token, theirs.id)).details.worker_name).toBe('dl-box')
    // The list shows the same, read for the whole page at once.
    const listed = await t.req('GET', '/v1/batches', { token: stranger.token })
    expect(listed.body.data.find((b: { id: string }) => b.id === theirs.id).waiting).toEqual(hidden)

    await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: wid, model: 'dl-w:1', status: 'verifying' },
    })
    expect(await waitingOf(f.user.token, own.id)).toEqual({
      reason: 'downloading',
      message: `Worker dl-box has downloaded ${entry.id} and is verifying it.`,
      details: { worker_name: 'dl-box', status: 'verifying', completed_bytes: null, total_bytes: null },
    })
    // Done: the model is in the inventory and the ask ends; the worker serves it.
    await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: wid, model: 'dl-w:1', status: 'completed' },
    })
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('dl-w:1')] })
    expect((await waitingOf(f.user.token, own.id)).reason).toBe('queued')
  })

  test('loading: a worker that serves it reports loading it (heartbeat loading_models)', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'ld:1' })
    const f = await makeFleet(t)
    const stranger = await makeUser(t)
    const own = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const theirs = await makeValidatedBatch(t.deps, { userId: stranger.id, model: entry.id })
    const wid = await registerWorker(t, f.key, { name: 'ld-box', capabilities: { loads: true } })
    await heartbeat(t, f.key, wid, { inventory: [inventoryItem('ld:1')], loading_models: ['ld:1'] })
    expect(await waitingOf(f.user.token, own.id)).toEqual({
      reason: 'loading',
      message: `Worker ld-box is loading ${entry.id} now.`,
      details: { worker_name: 'ld-box', workers: 1 },
    })
    expect(await waitingOf(stranger.token, theirs.id)).toEqual({
      reason: 'loading',
      message: `A worker is loading ${entry.id} now.`,
      details: { worker_name: null, workers: 1 },
    })
    // Loaded: it waits its turn.
    await heartbeat(t, f.key, wid, {
      inventory: [inventoryItem('ld:1', { loaded: true })],
      loaded_models: ['ld:1'],
    })
    expect((await waitingOf(f.user.token, own.id)).reason).toBe('queued')
  })
})

describe('queued', () => {
  test('behind the older validated batches of its model, with what runs of it; null once claimed', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'q:1' })
    const other = await makeCatalogEntry(t.deps, { runtime_model_id: 'q:other' })
    const f = await makeFleet(t)
    const b = await makeUser(t)
    const first = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, requests: 3 })
    const second = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, requests: 5 })
    // Another model's batch, however old, is no one's queue here.
    await makeValidatedBatch(t.deps, { userId: b.id, model: other.id, requests: 7 })
    const third = await makeValidatedBatch(t.deps, { userId: b.id, model: entry.id, requests: 2 })
    const wid = await registerWorker(t, f.key, { models: ['q:1'] })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)

    expect(await waitingOf(b.token, third.id)).toEqual({
      reason: 'queued',
      message: `Queued behind 8 requests in 2 batches of ${entry.id}; 1 online worker can serve it.`,
      details: { ahead: { batches: 2, requests: 8 }, running: { batches: 0, requests: 0 }, workers: 1 },
    })
    expect(await waitingOf(f.user.token, first.id)).toEqual({
      reason: 'queued',
      message: `Next in line for ${entry.id}; 1 online worker can serve it.`,
      details: { ahead: { batches: 0, requests: 0 }, running: { batches: 0, requests: 0 }, workers: 1 },
    })

    // The worker claims the oldest; it runs, and one request of it is done.
    const job = (await poll(t, f.key, wid))!
    expect(job.job_id).toBe(first.id)
    const progress = await t.req('POST', '/workers/progress', {
      token: f.key,
      body: { worker_id: wid, job_id: first.id, completed_prompts: 1, failed_prompts: 0 },
    })
    expect(progress.status).toBe(200)
    expect(await waitingOf(b.token, third.id)).toEqual({
      reason: 'queued',
      message: `Queued behind 5 requests in 1 batch of ${entry.id}; 1 online worker can serve it; 1 batch of it is running (2 requests left).`,
      details: { ahead: { batches: 1, requests: 5 }, running: { batches: 1, requests: 2 }, workers: 1 },
    })
    expect(await waitingOf(f.user.token, second.id)).toMatchObject({
      details: { ahead: { batches: 0, requests: 0 } },
    })
    // Only a validated batch waits.
    expect(await waitingOf(f.user.token, first.id)).toBeNull()
  })

  test('a batch still validating has no waiting, in the list as in the detail', async () => {
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'val:1' })
    const u = await makeUser(t)
    const batch = await makeValidatedBatch(t.deps, { userId: u.id, model: entry.id, status: 'validating' })
    expect(await waitingOf(u.token, batch.id)).toBeNull()
    const listed = await t.req('GET', '/v1/batches', { token: u.token })
    expect(listed.body.data.map((x: { waiting: unknown }) => x.waiting)).toEqual([null])
  })
})
