import { afterAll, describe, expect, test } from 'bun:test'
import { allRequestsRecorded, makeTestApp, type TestApp } from '../helpers/app'
import { makeSuperadmin, makeUser } from '../helpers/builders'
import { capturedLogLines } from '../helpers/secrets'
import {
  type Fleet,
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  registerWorker,
} from '../helpers/workers'

const apps: TestApp[] = []
afterAll(() => {
  for (const a of apps) a.close()
})
const fresh = () => {
  const a = makeTestApp()
  apps.push(a)
  return a
}

const FIELDS = [
  'as_of',
  'gpus_online',
  'models_servable',
  'object',
  'vram_total_gb',
  'workers_busy',
  'workers_idle',
  'workers_online',
]

/** `count` heartbeated workers (24 GB, 2 GPUs each) hosting `names`. */
async function fleetOf(t: TestApp, f: Fleet, count: number, names: string[], activity = 'idle') {
  const ids: string[] = []
  for (let i = 0; i < count; i++) {
    const wid = await registerWorker(t, f.key, {
      hostname: `secret-host-${i}.lab`,
      gpus: [
        { vendor: 'nvidia', name: 'Secret GPU X', vram_gb: 12, driver: '1', cuda: '12' },
        { vendor: 'nvidia', name: 'Secret GPU X', vram_gb: 12, driver: '1', cuda: '12' },
      ],
    })
    await heartbeat(t, f.key, wid, {
      activity,
      vram_total_gb: 24,
      inventory: names.map((n) => inventoryItem(n)),
    })
    ids.push(wid)
  }
  return ids
}

describe('GET /v1/pool/capacity', () => {
  test('anonymous callers get the reduced view: no hardware figures, public entries only, nothing identifying', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    const pub = await makeCatalogEntry(t.deps, {
      runtime_model_id: 'pub:1',
      display_name: 'Public One',
      parameter_size: '8B',
    })
    await makeCatalogEntry(t.deps, { runtime_model_id: 'priv:1', org_id: f.orgId })
    const ids = await fleetOf(t, f, 3, ['pub:1', 'priv:1'])
    const res = await t.req('GET', '/v1/pool/capacity')
    expect(res.status).toBe(200)
    expect(res.headers.get('cache-control')).toBe('max-age=15')
    expect(Object.keys(res.body).sort()).toEqual(FIELDS)
    expect(res.body).toEqual({
      object: 'pool.capacity',
      workers_online: 3,
      workers_idle: 3,
      workers_busy: 0,
      gpus_online: null,
      vram_total_gb: null,
      models_servable: [{ id: pub.id, display_name: 'Public One', parameter_size: '8B' }],
      as_of: t.clock.now(),
    })
    for (const forbidden of ['secret-host', 'Secret GPU', f.orgId, ...ids])
      expect(res.text).not.toContain(forbidden)
  })

  test('a worker key is treated as anonymous; a bad credential is 401', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    await fleetOf(t, f, 3, [])
    const asWorker = await t.req('GET', '/v1/pool/capacity', { token: f.key })
    expect(asWorker.status).toBe(200)
    expect(asWorker.body.gpus_online).toBeNull()
    expect((await t.req('GET', '/v1/pool/capacity', { token: `gk-${'0'.repeat(40)}` })).status).toBe(401)
  })

  test('signed-in callers see hardware figures only from MIN_WORKERS_FOR_HARDWARE online workers', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    await fleetOf(t, f, 2, [])
    const two = await t.req('GET', '/v1/pool/capacity', { token: f.user.token })
    expect(two.body).toMatchObject({ workers_online: 2, gpus_online: null, vram_total_gb: null })
    t.clock.advance(15) // past the cache
    await fleetOf(t, f, 2, [], 'busy')
    const four = await t.req('GET', '/v1/pool/capacity', { token: f.user.token })
    expect(four.body).toMatchObject({
      workers_online: 4,
      workers_idle: 2,
      workers_busy: 2,
      gpus_online: 8,
      vram_total_gb: 96,
    })
  })

  test('online is decided at read time: silent workers are not counted', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    const e = await makeCatalogEntry(t.deps, { runtime_model_id: 'rt:1' })
    await fleetOf(t, f, 1, ['rt:1'])
    t.clock.advance(60)
    const late = await fleetOf(t, f, 1, [], 'downloading_model')
    const first = await t.req('GET', '/v1/pool/capacity')
    expect(first.body).toMatchObject({ workers_online: 2, workers_busy: 1, models_servable: [{ id: e.id }] })
    t.clock.advance(61)
    const second = await t.req('GET', '/v1/pool/capacity')
    expect(second.body).toMatchObject({ workers_online: 1, workers_busy: 1, models_servable: [] })
    void late
  })

  test('models_servable: hosted AND fitting, by the poll predicate', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    const fits = await makeCatalogEntry(t.deps, { runtime_model_id: 'fit:1', vram_gb: 20 })
    await makeCatalogEntry(t.deps, { runtime_model_id: 'nofit:1', vram_gb: 40 })
    await makeCatalogEntry(t.deps, { runtime_model_id: 'nohost:1' })
    await makeCatalogEntry(t.deps, { runtime_model_id: 'fit:1', id: 'fit-disabled-q4km', enabled: false })
    await fleetOf(t, f, 1, ['fit:1', 'nofit:1'])
    const res = await t.req('GET', '/v1/pool/capacity')
    expect(res.body.models_servable.map((m: any) => m.id)).toEqual([fits.id])
  })

  test('org-private entries appear to members only; a superadmin sees all; each user is cached apart', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    const outsider = await makeUser(t)
    const admin = await makeSuperadmin(t)
    const priv = await makeCatalogEntry(t.deps, { runtime_model_id: 'pv:1', org_id: f.orgId })
    await fleetOf(t, f, 1, ['pv:1'])
    const ids = async (token?: string) =>
      (await t.req('GET', '/v1/pool/capacity', { token })).body.models_servable.map((m: any) => m.id)
    expect(await ids(f.user.token)).toEqual([priv.id])
    expect(await ids(outsider.token)).toEqual([])
    expect(await ids(admin.token)).toEqual([priv.id])
    expect(await ids()).toEqual([])
  })

  test('responses are cached POOL_CACHE_SECONDS per caller class', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    await fleetOf(t, f, 1, [])
    const a1 = await t.req('GET', '/v1/pool/capacity')
    const u1 = await t.req('GET', '/v1/pool/capacity', { token: f.user.token })
    expect(a1.body.workers_online).toBe(1)
    t.clock.advance(10)
    await fleetOf(t, f, 1, [])
    expect((await t.req('GET', '/v1/pool/capacity')).body).toEqual(a1.body)
    expect((await t.req('GET', '/v1/pool/capacity', { token: f.user.token })).body).toEqual(u1.body)
    // A caller class not seen before computes afresh.
    const other = await makeUser(t)
    expect((await t.req('GET', '/v1/pool/capacity', { token: other.token })).body.workers_online).toBe(2)
    t.clock.advance(5)
    const a2 = await t.req('GET', '/v1/pool/capacity')
    expect(a2.body.workers_online).toBe(2)
    expect(a2.body.as_of).toBe(t.clock.now())
  })

  test('callers that miss together share one computation; a failed one is not kept', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    await fleetOf(t, f, 1, [])
    const fleet = t.deps.store.fleet
    const capacityCounts = fleet.capacityCounts
    let reads = 0
    let fail = false
    fleet.capacityCounts = async (...a) => {
      reads++
      if (fail) throw new Error('database gone')
      return capacityCounts.apply(fleet, a)
    }
    try {
      const answers = await Promise.all(Array.from({ length: 10 }, () => t.req('GET', '/v1/pool/capacity')))
      expect(answers.map((r) => r.status)).toEqual(Array(10).fill(200))
      expect(new Set(answers.map((r) => r.text)).size).toBe(1)
      expect(reads).toBe(1)
      // Expired while the database fails: the callers that miss share the failure, then it is retried.
      t.clock.advance(t.deps.config.POOL_CACHE_SECONDS)
      fail = true
      const failed = await Promise.all(Array.from({ length: 5 }, () => t.req('GET', '/v1/pool/capacity')))
      expect(failed.every((r) => r.status >= 500)).toBe(true)
      expect(reads).toBe(2)
      fail = false
      expect((await t.req('GET', '/v1/pool/capacity')).status).toBe(200)
      expect(reads).toBe(3)
    } finally {
      fleet.capacityCounts = capacityCounts
    }
  })

  test('a cached answer comes back without a promise; a miss that fails is answered in the envelope, and logged once', async () => {
    const t = fresh()
    const f = await makeFleet(t)
    await fleetOf(t, f, 1, [])
    // app.fetch is the handler Elysia gives Bun: a Response, not a promise of one, is what makes a
    // cached answer cheap (src/modules/pool/index.ts).
    const ask = (id: string, token?: string) =>
      t.app.fetch(
        new Request('http://localhost/v1/pool/capacity', {
          headers: { 'x-request-id': id, ...(token ? { authorization: `Bearer ${token}` } : {}) },
        }),
      )
    for (const token of [undefined, f.user.token]) {
      const first = ask('pool-first', token)
      expect(first).toBeInstanceOf(Promise)
      expect((await first).status).toBe(200)
      const cached = ask('pool-cached', token)
      expect(cached).toBeInstanceOf(Response)
      expect((cached as Response).status).toBe(200)
      expect((cached as Response).headers.get('x-request-id')).toBe('pool-cached')
      expect(((await (cached as Response).json()) as any).workers_online).toBe(1)
    }
    const fleet = t.deps.store.fleet
    const capacityCounts = fleet.capacityCounts
    fleet.capacityCounts = async () => {
      throw Object.assign(new Error('the database went away'), { errno: '57P01' })
    }
    try {
      t.clock.advance(t.deps.config.POOL_CACHE_SECONDS)
      const id = `pool-failed-${Date.now()}`
      const res = await ask(id)
      expect(res.status).toBe(503)
      expect(res.headers.get('x-request-id')).toBe(id)
      expect(res.headers.get('retry-after')).toBe('5')
      expect(((await res.json()) as any).error.code).toBe('database_unavailable')
      await allRequestsRecorded(t.deps)
      const lines = capturedLogLines()
        .filter((l) => l.includes(id))
        .map((l) => JSON.parse(l))
      expect(lines.map((l) => [l.msg, l.status ?? null, l.route ?? null])).toEqual([
        ['database unavailable', null, null],
        ['request', 503, '/v1/pool/capacity'],
      ])
    } finally {
      fleet.capacityCounts = capacityCounts
    }
  })
})
