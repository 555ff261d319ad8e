import { afterEach, describe, expect, test } from 'bun:test'
import type { Job } from '../../src/modules/workers/claim'
import { buildRequest, makeTestApp, type TestApp } from '../helpers/app'
import { makeUser } from '../helpers/builders'
import {
  type Fleet,
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// docs/api.md §7 Placement through POST /workers/poll, with workers that load models themselves
// (capabilities.loads): aging, pays-to-load, the spread and its hysteresis, fair share within a
// model, and the rules before placement under PLACEMENT=loaded_first. Each test has its own app: the placement weighs the whole
// fleet and queue. Time is the app's manual clock; the server reads its figures at most once a
// second, so a test moves the clock on before a poll that must see new batches.

const A = 'alpha.gguf'
const B = 'bravo.gguf'
/** What every worker measured: 100 requests per second, a 3 s load, on either model. */
const STATS = [A, B].map((name) => ({ name, load_seconds: 3, requests_per_second: 100 }))

let t: TestApp
afterEach(() => t?.close())

interface Setup {
  f: Fleet
  a: string
  b: string
}

async function setup(env: Record<string, string> = {}): Promise<Setup> {
  t = makeTestApp(env)
  const f = await makeFleet(t)
  const a = (await makeCatalogEntry(t.deps, { id: 'alpha-q4km', runtime: 'llama.cpp', runtime_model_id: A }))
    .id
  const b = (await makeCatalogEntry(t.deps, { id: 'bravo-q4km', runtime: 'llama.cpp', runtime_model_id: B }))
    .id
  return { f, a, b }
}

/** A heartbeat of a managed engine holding both models on disk, `loaded` in VRAM. */
const beat = (s: Setup, wid: string, loaded: string[]) =>
  heartbeat(t, s.f.key, wid, {
    inventory: [A, B].map((n) => inventoryItem(n, { loaded: loaded.includes(n), runtime: 'llama.cpp' })),
    loaded_models: loaded,
    model_stats: STATS,
  })

/** A worker whose daemon loads models (capabilities.loads), both models on disk, `loaded` loaded. */
async function loadsWorker(s: Setup, loaded: string[]) {
  const wid = await registerWorker(t, s.f.key, {
    capabilities: { loads: true },
    runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
  })
  expect((await beat(s, wid, loaded)).status).toBe(200)
  return wid
}

/** `count` validated batches of `requests` requests each, waiting from now. */
async function batches(s: Setup, model: string, count: number, requests = 100, userId = s.f.user.id) {
  const ids = []
  for (let i = 0; i < count; i++) ids.push((await makeValidatedBatch(t.deps, { userId, model, requests })).id)
  return ids
}

/** The worker's results for `job`: every request answered. */
async function finish(s: Setup, wid: string, job: Job) {
  const lines = Array.from({ length: job.total_requests }, (_, i) => okLine(`req-${i + 1}`)).join('\n')
  const res = await upload(
    t,
    s.f.key,
    { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id },
    `${lines}\n`,
  )
  expect(res.status).toBe(200)
}

/** Resolves once `n` polls are held on the server (the event, never a guessed time). */
async function heldPolls(n: number) {
  while (t.deps.pollWaiters.size !== n) await new Promise((r) => setImmediate(r))
}

/** The server's figures are read at most once a second: the next poll sees what changed. */
const tick = (seconds = 1) => t.clock.advance(seconds)

describe('docs/api.md §7 Placement: no starvation', () => {
  test('a stream of a batches on workers with a loaded does not starve one b batch: it starts once it has waited PLACEMENT_MAX_WAIT_SECONDS', async () => {
    const s = await setup()
    const workers = [await loadsWorker(s, [A]), await loadsWorker(s, [A])]
    const [rare] = await batches(s, s.b, 1, 2)
    const validatedAt = t.clock.now()
    let started: number | null = null
    // Every 20 s a new a batch for each worker; each worker runs what it is given.
    while (started === null) {
      tick(20)
      await batches(s, s.a, 2)
      for (const wid of workers) {
        expect((await beat(s, wid, [A])).status).toBe(200)
        const job = (await poll(t, s.f.key, wid))!
        expect(job).not.toBeNull()
        if (job.job_id === rare) started = t.clock.now()
        else expect(job.catalogue_id).toBe(s.a)
        await finish(s, wid, job)
      }
      expect(t.clock.now() - validatedAt).toBeLessThanOrEqual(t.config.PLACEMENT_MAX_WAIT_SECONDS + 20)
    }
    // Not before it was overdue: until then the loaded a went first (b, two requests, never pays a load).
    expect(started - validatedAt).toBeGreaterThanOrEqual(t.config.PLACEMENT_MAX_WAIT_SECONDS)
  })

  test('PLACEMENT=loaded_first keeps the rules before placement: the b batch waits as long as a work does, and nobody spreads', async () => {
    const s = await setup({ PLACEMENT: 'loaded_first' })
    const workers = [await loadsWorker(s, [A]), await loadsWorker(s, [A])]
    const [rare] = await batches(s, s.b, 1, 2)
    const validatedAt = t.clock.now()
    while (t.clock.now() - validatedAt < 3 * t.config.PLACEMENT_MAX_WAIT_SECONDS) {
      tick(20)
      await batches(s, s.a, 2)
      for (const wid of workers) {
        expect((await beat(s, wid, [A])).status).toBe(200)
        const job = (await poll(t, s.f.key, wid))!
        expect(job.catalogue_id).toBe(s.a)
        await finish(s, wid, job)
      }
    }
    // A long b queue as well: both workers stay on a while a waits.
    await batches(s, s.b, 30)
    await batches(s, s.a, 2)
    tick()
    for (const wid of workers) expect((await poll(t, s.f.key, wid))?.catalogue_id).toBe(s.a)
    // With a drained, b runs: its oldest first.
    expect((await poll(t, s.f.key, await loadsWorker(s, [A])))?.job_id).toBe(rare)
  })
})

describe('docs/api.md §7 Placement: when a load pays', () => {
  test('a tiny b batch does not pull a worker off a long a queue; a long b queue does', async () => {
    const s = await setup()
    const [w1, w2] = [await loadsWorker(s, [A]), await loadsWorker(s, [A])]
    await batches(s, s.a, 20)
    const [tiny] = await batches(s, s.b, 1, 5)
    tick()
    // Five requests take 0.05 s at 100/s, less than a 3 s load: every worker on a stays there.
    for (const wid of [w1, w2, await loadsWorker(s, [A])])
      expect((await poll(t, s.f.key, wid))?.catalogue_id).toBe(s.a)
    // Now 2,000 requests of b wait too: twenty seconds at 100/s outlast a load, and with more of b
    // waiting than of a, the next worker on a belongs on b.
    await batches(s, s.b, 20)
    tick()
    const switched = (await poll(t, s.f.key, await loadsWorker(s, [A])))!
    expect(switched.catalogue_id).toBe(s.b)
    // Within b, the oldest batch: the tiny one.
    expect(switched.job_id).toBe(tiny)
  })
})

describe('docs/api.md §7 Placement: a late model nobody serves', () => {
  test('a model nobody has measured is weighed at what the fleet measured of the others: its late queue waits for a worker freeing up', async () => {
    const s = await setup()
    // Every worker measured a (100/s, a 3 s load), none ever ran b.
    const onlyA = (wid: string) =>
      heartbeat(t, s.f.key, wid, {
        inventory: [A, B].map((n) => inventoryItem(n, { loaded: n === A, runtime: 'llama.cpp' })),
        loaded_models: [A],
        model_stats: [STATS[0]!],
      })
    const settled = async () => {
      const wid = await registerWorker(t, s.f.key, {
        capabilities: { loads: true },
        runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
      })
      expect((await onlyA(wid)).status).toBe(200)
      return wid
    }
    await batches(s, s.a, 40)
    tick()
    // Three workers settle on a; then 400 requests of b arrive.
    for (let i = 0; i < 3; i++) expect((await poll(t, s.f.key, await settled()))?.catalogue_id).toBe(s.a)
    await batches(s, s.b, 4)
    tick()
    // At the fleet's 100/s and 3 s, b's load and work take 7 s, and a keeps the four workers busy
    // 9.25 s (3,700 at 400/s): the fourth stays on a. (Assumed at PLACEMENT_DEFAULT_REQUESTS_PER_SECOND
    // and PLACEMENT_DEFAULT_LOAD_SECONDS, b would look like 430 s of work and pull it away.)
    const fourth = await settled()
    expect((await poll(t, s.f.key, fourth))?.catalogue_id).toBe(s.a)
  })
})

describe('docs/api.md §7 Placement: the spread', () => {
  test('four workers on a, waiting work 3:1 → three stay on a, one moves to b; it does not swap back when the shares wobble', async () => {
    const s = await setup()
    const workers = []
    for (let i = 0; i < 4; i++) workers.push(await loadsWorker(s, [A]))
    await batches(s, s.a, 30)
    await batches(s, s.b, 10)
    tick()
    const jobs = []
    for (const wid of workers) jobs.push((await poll(t, s.f.key, wid))!)
    const onB = jobs.flatMap((j, i) => (j.catalogue_id === s.b ? [i] : []))
    // Exactly one: the server counts a worker on b from its claim, before any heartbeat says so.
    expect(onB).toHaveLength(1)
    expect(jobs.filter((j) => j.catalogue_id === s.a)).toHaveLength(3)
    const mover = workers[onB[0]!]!
    // It finishes, and its daemon reports b loaded now.
    await finish(s, mover, jobs[onB[0]!]!)
    expect((await beat(s, mover, [B])).status).toBe(200)
    // a's share grows by half a worker (waiting a:b from 27:9 to 7:1): moving back would lower the
    // imbalance by one worker, not by the one and a half a switch needs. It stays on b.
    await batches(s, s.a, 36)
    tick()
    expect((await poll(t, s.f.key, mover))?.catalogue_id).toBe(s.b)
  })
})

describe('docs/api.md §7 Placement: what a worker is on', () => {
  test('the work it holds, not a heartbeat that lags behind its last claim', async () => {
    const s = await setup()
    const wid = await registerWorker(t, s.f.key, {
      max_concurrent_jobs: 2,
      capabilities: { loads: true },
      runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
    })
    // Its last heartbeat says a is loaded; nothing of a waits, a queue of b does.
    expect((await beat(s, wid, [A])).status).toBe(200)
    await batches(s, s.b, 10)
    tick()
    expect((await poll(t, s.f.key, wid))?.catalogue_id).toBe(s.b)
    // Before any heartbeat says b is loaded, a tiny a batch arrives and the daemon asks for its
    // next job: it is on b (it holds a b batch), and two requests of a do not pay a load.
    await batches(s, s.a, 1, 2)
    tick()
    expect((await poll(t, s.f.key, wid))?.catalogue_id).toBe(s.b)
  })

  test('an idle worker with a model loaded serves it only while its poll is under way', async () => {
    const s = await setup()
    const x = await loadsWorker(s, [B])
    const y = await loadsWorker(s, [A])
    // x waits for work (a held poll), b loaded; a tiny b batch arrives (inserted: nobody is woken).
    const aborted = new AbortController()
    const held = t.app.handle(
      new Request(
        buildRequest('http://localhost', 'POST', '/workers/poll', {
          token: s.f.key,
          body: { worker_id: x, wait_seconds: 30 },
        }),
        { signal: aborted.signal },
      ),
    )
    await heldPolls(1)
    const [small] = await batches(s, s.b, 1, 2)
    tick()
    // b is x's to take: two requests do not pay y a load.
    expect(await poll(t, s.f.key, y)).toBeNull()
    // x hangs up (its daemon is gone): b's batch is nobody's, and y takes it.
    aborted.abort()
    await held.catch(() => {})
    await heldPolls(0)
    expect((await poll(t, s.f.key, y))?.job_id).toBe(small)
  })
})

describe('docs/api.md §7 Placement: a worker of several GPUs (the poll says how it stands)', () => {
  /** A poll with what the daemon says of its GPUs and models now. */
  const pollSaying = async (s: Setup, wid: string, said: Record<string, unknown>) => {
    const res = await t.req('POST', '/workers/poll', { token: s.f.key, body: { worker_id: wid, ...said } })
    expect(res.status).toBe(200)
    return res.body.job as Job | null
  }

  test('its loaded models count as the ones it serves; a spare GPU takes the idle loaded model’s work, then another model’s', async () => {
    const s = await setup()
    const C = 'charlie.gguf'
    const c = (
      await makeCatalogEntry(t.deps, { id: 'charlie-q4km', runtime: 'llama.cpp', runtime_model_id: C })
    ).id
    const wid = await registerWorker(t, s.f.key, {
      max_concurrent_jobs: 4,
      capabilities: { loads: true },
      runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
    })
    expect(
      (
        await heartbeat(t, s.f.key, wid, {
          inventory: [A, B, C].map((n) => inventoryItem(n, { loaded: n === A, runtime: 'llama.cpp' })),
          loaded_models: [A],
          model_stats: STATS,
        })
      ).status,
    ).toBe(200)
    await batches(s, s.a, 3)
    await batches(s, s.b, 3)
    await batches(s, c, 3)
    tick()
    const first = (await pollSaying(s, wid, { loaded_models: [A], models_in_use: [] }))!
    expect(first.catalogue_id).toBe(s.a)
    // a's job runs on one GPU, the other is idle: another model's work (no spare: a again).
    expect(
      (await pollSaying(s, wid, { spare_gpu: true, loaded_models: [A], models_in_use: [A] }))?.catalogue_id,
    ).not.toBe(s.a)
    // b is loaded on the other GPU now, idle (its job uploads), a busy: b's work first, though
    // the server still counts a b batch held; the heartbeat has not said b is loaded.
    tick()
    expect(
      (await pollSaying(s, wid, { spare_gpu: true, loaded_models: [A, B], models_in_use: [A] }))
        ?.catalogue_id,
    ).toBe(s.b)
    // No spare GPU: it keeps to the models loaded there (a or b), never c.
    tick()
    const kept = await pollSaying(s, wid, { loaded_models: [A, B], models_in_use: [A, B] })
    expect([s.a, s.b]).toContain(kept!.catalogue_id)
  })

  test('a model the poll names in failed_models is not claimed for it: its batch waits, another model’s is taken; named no more, it is', async () => {
    const s = await setup()
    const wid = await registerWorker(t, s.f.key, {
      max_concurrent_jobs: 4,
      capabilities: { loads: true },
      runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
    })
    expect((await beat(s, wid, [A])).status).toBe(200)
    const [a] = await batches(s, s.a, 1)
    const [b] = await batches(s, s.b, 1)
    tick()
    // a is loaded there, and older: without failed_models its batch would go first.
    expect((await pollSaying(s, wid, { loaded_models: [A], failed_models: [A] }))?.job_id).toBe(b)
    tick()
    expect(
      await pollSaying(s, wid, { loaded_models: [A], models_in_use: [B], failed_models: [A] }),
    ).toBeNull()
    tick()
    expect((await pollSaying(s, wid, { loaded_models: [A], models_in_use: [B] }))?.job_id).toBe(a)
  })

  test('a spare GPU takes the busy model’s work, saying copy while its waiting work outlasts a load there', async () => {
    const s = await setup()
    const wid = await registerWorker(t, s.f.key, {
      max_concurrent_jobs: 8,
      capabilities: { loads: true },
      runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
    })
    expect((await beat(s, wid, [A])).status).toBe(200)
    await batches(s, s.a, 6)
    tick()
    // No spare GPU: no copy.
    const first = (await pollSaying(s, wid, { loaded_models: [A], models_in_use: [] }))!
    expect(first.catalogue_id).toBe(s.a)
    expect(first.copy).toBeUndefined()
    // 500 requests wait, 400 once this is claimed: both outlast a load at this worker's rate (3 s × 100/s).
    const said = { spare_gpu: true, loaded_models: [A], models_in_use: [A] }
    for (const waiting of [500, 400]) {
      tick()
      const job = (await pollSaying(s, wid, said))!
      expect([job.catalogue_id, job.copy, waiting]).toEqual([s.a, true, waiting])
    }
    // 300 do not: the batch is still the spare GPU's to take, as work for the copies it has.
    tick()
    const last = (await pollSaying(s, wid, said))!
    expect(last.catalogue_id).toBe(s.a)
    expect(last.copy).toBeUndefined()
  })
})

describe('docs/api.md §7 Placement: fair share within a model', () => {
  test("one user's 20 queued batches do not starve another's one on a worker that loads models", async () => {
    const s = await setup()
    const other = await makeUser(t)
    const wid = await registerWorker(t, s.f.key, {
      max_concurrent_jobs: 4,
      capabilities: { loads: true },
      runtimes: [{ engine: 'llama.cpp', base_url: 'http://127.0.0.1:8081', status: 'online' }],
    })
    expect((await beat(s, wid, [A])).status).toBe(200)
    const flood = await batches(s, s.a, 20)
    const [single] = await batches(s, s.a, 1, 100, other.id)
    tick()
    const next = [(await poll(t, s.f.key, wid))?.job_id, (await poll(t, s.f.key, wid))?.job_id]
    expect(next).toEqual([flood[0], single])
  })
})
