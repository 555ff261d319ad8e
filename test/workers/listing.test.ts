import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makePersonalKey, makeSuperadmin, makeUser } from '../helpers/builders'
import {
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  registerWorker,
  sha,
} from '../helpers/workers'

const t = makeTestApp()
afterAll(() => t.close())

const ROW_FIELDS = [
  'activity',
  'capabilities',
  'concurrency',
  'current_job_id',
  'daemon_version',
  'gpu_utilization',
  'gpus',
  'hostname',
  'id',
  'last_heartbeat_at',
  'loaded_models',
  'models',
  'name',
  'object',
  'org_id',
  'registered_at',
  'runtimes',
  'status',
  'uptime_seconds',
  'vram_available_gb',
  'vram_total_gb',
]

describe('GET /v1/orgs/{org_id}/workers', () => {
  test('members see the org’s workers with status, activity, live VRAM and loaded models', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key, { models: ['cfg:1'] })
    await heartbeat(t, f.key, wid, {
      activity: 'busy',
      vram_available_gb: 10.5,
      loaded_models: ['inv:1'],
      inventory: [inventoryItem('inv:1', { sha256: sha('inv'), loaded: true })],
    })
    const res = await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ object: 'list', first_id: wid, last_id: wid, has_more: false })
    const row = res.body.data[0]
    expect(Object.keys(row).sort()).toEqual(ROW_FIELDS)
    expect(row).toMatchObject({
      id: wid,
      object: 'worker',
      org_id: f.orgId,
      status: 'online',
      activity: 'busy',
      vram_total_gb: 24,
      vram_available_gb: 10.5,
      loaded_models: ['inv:1'],
      // No index registered: its place in the list; no per-GPU memory heartbeated: null.
      gpus: [
        {
          vendor: 'nvidia',
          name: 'RTX 4090',
          vram_gb: 24,
          driver: '550.1',
          cuda: '12.4',
          index: 0,
          memory_used_gb: null,
          memory_total_gb: null,
        },
      ],
      runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
      last_heartbeat_at: t.clock.now(),
    })
    expect(row.models.sort((a: any, b: any) => a.name.localeCompare(b.name))).toEqual([
      {
        name: 'cfg:1',
        runtime: null,
        runtime_model_id: 'cfg:1',
        digest: null,
        status: 'available',
        loaded: false,
        state: 'advertised',
        progress: null,
        failure: null,
        load_seconds: null,
        requests_per_second: null,
        gpus: null,
      },
      {
        name: 'inv:1',
        runtime: 'ollama',
        runtime_model_id: 'inv:1',
        digest: sha('inv'),
        status: 'available',
        loaded: true,
        state: 'loaded',
        progress: null,
        failure: null,
        load_seconds: null,
        requests_per_second: null,
        gpus: null,
      },
    ])
    expect(row.capabilities).toEqual({ shards: false, loads: false })
  })

  test('each model’s state: on disk, loading, loaded, downloading with its bytes; measured figures', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key, { capabilities: { loads: true } })
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'dl:1', size_gb: 1 })
    await heartbeat(t, f.key, wid, {
      loaded_models: ['a:1'],
      loading_models: ['b:1'],
      inventory: ['a:1', 'b:1', 'c:1'].map((n) => inventoryItem(n, { loaded: n === 'a:1' })),
      model_stats: [{ name: 'a:1', load_seconds: 2.5, requests_per_second: 40 }],
    })
    const now = t.clock.now()
    expect(
      await t.deps.store.fleet.askPull(
        {
          catalog_id: entry.id,
          worker_id: wid,
          runtime: 'ollama',
          runtime_model_id: 'dl:1',
          asked_at: now,
          last_progress_at: now,
        },
        null,
      ),
    ).toBe(true)
    const progress = await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: wid, model: 'dl:1', status: 'downloading', completed_bytes: 300, total_bytes: 1000 },
    })
    expect(progress.status).toBe(200)
    const row = (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data[0]
    expect(row.capabilities).toEqual({ shards: false, loads: true })
    const states = Object.fromEntries(
      row.models.map((m: any) => [m.name, [m.state, m.progress, m.load_seconds, m.requests_per_second]]),
    )
    expect(states).toEqual({
      'a:1': ['loaded', null, 2.5, 40],
      'b:1': ['loading', null, null, null],
      'c:1': ['on_disk', null, null, null],
      'dl:1': ['downloading', { completed_bytes: 300, total_bytes: 1000 }, null, null],
    })
    // A steady heartbeat without model_stats keeps the last figures; loading_models is restated.
    await heartbeat(t, f.key, wid, {
      loaded_models: ['a:1', 'b:1'],
      inventory: ['a:1', 'b:1', 'c:1'].map((n) => inventoryItem(n, { loaded: n !== 'c:1' })),
    })
    await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: wid, model: 'dl:1', status: 'verifying' },
    })
    const again = (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data[0]
    expect(Object.fromEntries(again.models.map((m: any) => [m.name, [m.state, m.load_seconds]]))).toEqual({
      'a:1': ['loaded', 2.5],
      'b:1': ['loaded', null],
      'c:1': ['on_disk', null],
      'dl:1': ['verifying', null],
    })
    // A failed download ends the ask; while its worker backs off, the model says it failed and why.
    await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: wid, model: 'dl:1', status: 'failed', error: 'sha256 mismatch' },
    })
    const done = (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data[0]
    expect(
      done.models.map((m: any) => [m.name, m.state, m.progress, m.failure?.error ?? null]).sort(),
    ).toEqual([
      ['a:1', 'loaded', null, null],
      ['b:1', 'loaded', null, null],
      ['c:1', 'on_disk', null, null],
      ['dl:1', 'download_failed', null, 'sha256 mismatch'],
    ])
  })

  test('each GPU by its index with its memory, and the GPUs each loaded model sits on (docs/api.md §7)', async () => {
    const f = await makeFleet(t)
    const gpu = (index: number) => ({
      vendor: 'nvidia',
      name: 'L4',
      vram_gb: 24,
      driver: '550',
      cuda: '12.4',
      index,
    })
    // --gpus 1,3: the daemon reports those two, by their nvidia-smi index.
    const wid = await registerWorker(t, f.key, { capabilities: { loads: true }, gpus: [gpu(1), gpu(3)] })
    const inventory = (loaded: string[]) =>
      ['a:1', 'b:1', 'c:1'].map((n) => inventoryItem(n, { loaded: loaded.includes(n) }))
    await heartbeat(t, f.key, wid, {
      loaded_models: ['a:1'],
      loading_models: ['b:1'],
      inventory: inventory(['a:1']),
      gpus: [
        { index: 1, memory_used_gb: 20.5, memory_total_gb: 24, utilization: 97 },
        { index: 3, memory_used_gb: 11, memory_total_gb: 24 },
      ],
      model_gpus: [
        { name: 'a:1', gpus: [1] },
        { name: 'b:1', gpus: [3] },
      ],
    })
    const read = async () =>
      (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data[0]
    const row = await read()
    expect(row.gpus.map((g: any) => [g.index, g.memory_used_gb, g.memory_total_gb])).toEqual([
      [1, 20.5, 24],
      [3, 11, 24],
    ])
    expect(Object.fromEntries(row.models.map((m: any) => [m.name, [m.state, m.gpus]]))).toEqual({
      'a:1': ['loaded', [1]],
      'b:1': ['loading', [3]],
      'c:1': ['on_disk', null],
    })
    // A heartbeat without per-GPU memory keeps the last figures; model_gpus is restated (none now).
    await heartbeat(t, f.key, wid, { loaded_models: [], inventory: inventory([]) })
    const after = await read()
    expect(after.gpus.map((g: any) => g.memory_used_gb)).toEqual([20.5, 11])
    expect(after.models.every((m: any) => m.gpus === null)).toBe(true)
    // A GPU index outside the protocol's bounds is a 400.
    const bad = await heartbeat(t, f.key, wid, { model_gpus: [{ name: 'a:1', gpus: [-1] }] })
    expect(bad.status).toBe(400)
  })

  test('a model whose load failed: load_failed with why, the failures in a row and until when (the server’s clock), then on disk again (docs/api.md §7)', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key, { capabilities: { loads: true } })
    const inventory = ['a:1', 'b:1', 'c:1'].map((n) => inventoryItem(n, { loaded: n === 'a:1' }))
    const error = 'exit code 1: E llama_model_load: model is corrupted or incomplete'
    const beat = await heartbeat(t, f.key, wid, {
      loaded_models: ['a:1'],
      loading_models: ['c:1'],
      inventory,
      load_failures: [
        { name: 'b:1', error, failures: 2, retry_in_seconds: 90 },
        // Being loaded again: the load under way is what it is.
        { name: 'c:1', error, failures: 1, retry_in_seconds: 30 },
      ],
    })
    expect(beat.status).toBe(200)
    const at = t.clock.now()
    const read = async () =>
      Object.fromEntries(
        (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data[0].models.map(
          (m: any) => [m.name, [m.state, m.failure]],
        ),
      )
    expect(await read()).toEqual({
      'a:1': ['loaded', null],
      'b:1': ['load_failed', { error, failures: 2, retry_at: at + 90 }],
      'c:1': ['loading', null],
    })
    // Its time passed, it is on disk again, though the last heartbeat still names it.
    t.clock.advance(91)
    expect((await read())['b:1']).toEqual(['on_disk', null])
    // Failed again; then a heartbeat without load_failures: none.
    await heartbeat(t, f.key, wid, {
      loaded_models: ['a:1'],
      inventory,
      load_failures: [{ name: 'b:1', error, failures: 3, retry_in_seconds: 180 }],
    })
    expect((await read())['b:1']).toEqual(['load_failed', { error, failures: 3, retry_at: at + 91 + 180 }])
    await heartbeat(t, f.key, wid, { loaded_models: ['a:1'], inventory })
    expect((await read())['b:1']).toEqual(['on_disk', null])
    // Out of the protocol's bounds: a 400.
    const bad = await heartbeat(t, f.key, wid, {
      load_failures: [{ name: 'b:1', error, failures: 0, retry_in_seconds: 5 }],
    })
    expect(bad.status).toBe(400)
  })

  test('paginates newest first', async () => {
    const f = await makeFleet(t)
    const ids = [
      await registerWorker(t, f.key),
      await registerWorker(t, f.key),
      await registerWorker(t, f.key),
    ]
    const page1 = await t.req('GET', `/v1/orgs/${f.orgId}/workers?limit=2`, { token: f.user.token })
    expect(page1.body.data.map((w: any) => w.id)).toEqual([ids[2], ids[1]])
    expect(page1.body.has_more).toBe(true)
    const page2 = await t.req('GET', `/v1/orgs/${f.orgId}/workers?limit=2&after=${page1.body.last_id}`, {
      token: f.user.token,
    })
    expect(page2.body.data.map((w: any) => w.id)).toEqual([ids[0]])
    expect(page2.body.has_more).toBe(false)
  })

  test('a non-member gets 404; a personal key or worker key 401; no credential 401', async () => {
    const f = await makeFleet(t)
    const stranger = await makeUser(t)
    const personal = await makePersonalKey(t, f.user)
    expect((await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: stranger.token })).status).toBe(404)
    expect((await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: personal.key })).status).toBe(401)
    expect((await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.key })).status).toBe(401)
    expect((await t.req('GET', `/v1/orgs/${f.orgId}/workers`)).status).toBe(401)
  })
})

describe('GET /v1/admin/workers', () => {
  test('a superadmin lists workers across orgs; anyone else is refused', async () => {
    const a = await makeFleet(t)
    const b = await makeFleet(t)
    const wa = await registerWorker(t, a.key)
    const wb = await registerWorker(t, b.key)
    const admin = await makeSuperadmin(t)
    const res = await t.req('GET', '/v1/admin/workers?limit=100', { token: admin.token })
    expect(res.status).toBe(200)
    const ids = res.body.data.map((w: any) => w.id)
    expect(ids).toContain(wa)
    expect(ids).toContain(wb)
    expect(Object.keys(res.body.data[0]).sort()).toEqual(ROW_FIELDS)
    expect((await t.req('GET', '/v1/admin/workers', { token: a.user.token })).status).toBe(403)
    expect((await t.req('GET', '/v1/admin/workers', { token: a.key })).status).toBe(401)
    expect((await t.req('GET', '/v1/admin/workers')).status).toBe(401)
  })
})
