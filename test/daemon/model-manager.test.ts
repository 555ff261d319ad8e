import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { manualTimers } from '../../src/daemon/backoff'
import type { EngineView } from '../../src/daemon/engines/types'
import { type ModelLease, ModelLost, ModelManager, ModelUnavailable } from '../../src/daemon/models/manager'
import type { Room } from '../../src/daemon/models/plan'
import { StateDir } from '../../src/daemon/state'
import { type MemoryEngine, memoryEngine } from '../helpers/memory-engine'

// The model manager (src/daemon/models/manager.ts) over an engine held in memory, at moments the
// test picks: what waits, what loads and unloads, what a job hears when its model goes away, and
// what is measured. The same manager against the real llama.cpp router: test/daemon/managed*.test.ts.

const root = mkdtempSync(join(tmpdir(), 'gk-models-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

function setup(
  names = ['a', 'b', 'c'],
  o: {
    budget?: number | null
    appliesParams?: boolean
    state?: StateDir
    modelsDir?: string
    /** A GPU ledger instead of the budget; `fresh` reads are counted. */
    gpus?: () => Room
    engineName?: 'llama.cpp' | 'vllm'
  } = {},
) {
  const engine = memoryEngine(names, {
    appliesParams: o.appliesParams,
    modelsDir: o.modelsDir,
    engine: o.engineName,
  })
  const reads: boolean[] = []
  const timers = manualTimers()
  const state = o.state ?? new StateDir(mkdtempSync(join(root, 'state-')))
  let changes = 0
  const manager = new ModelManager({
    engine,
    state,
    room: async (fresh) => {
      reads.push(fresh)
      return o.gpus ? o.gpus() : { budget_gb: o.budget === undefined ? 1 : o.budget }
    },
    timers,
    onChange: () => changes++,
  })
  return { engine, manager, timers, state, changes: () => changes, reads }
}

const need = (
  name: string,
  o: { job?: string; vram?: number | null; params?: Record<string, unknown> } = {},
) => ({
  job_id: o.job ?? `job-${name}`,
  name,
  vram_gb: o.vram === undefined ? 1 : o.vram,
  params: o.params ?? {},
})

/** A stage listener, and a promise of the first stage `match` accepts. */
function stages(match: (s: string) => boolean) {
  const heard: (string | null)[] = []
  let resolve = (_: string) => {}
  const seen = new Promise<string>((r) => {
    resolve = r
  })
  return {
    heard,
    seen,
    listen: (s: string | null) => {
      heard.push(s)
      if (s && match(s)) resolve(s)
    },
  }
}

const open = () => new AbortController().signal

describe('the model manager', () => {
  test('a job waits while the room is held by a model another job uses, then loads once that job is done with it', async () => {
    const { engine, manager } = setup()
    const a = await manager.acquire(need('a'), open())
    const waiting = stages((s) => s.startsWith('waiting'))
    const b = manager.acquire(need('b'), open(), waiting.listen)
    expect(await waiting.seen).toBe('waiting for b: b needs 1 GB, 0 GB free of 1 GB (a in use by 1 job)')
    // Never unloaded under the job using it.
    expect(engine.calls).toEqual(['load a {}'])
    expect(engine.state('a')).toBe('loaded')
    a.release(3)
    const lease = await b
    expect(lease.name).toBe('b')
    expect(engine.calls).toEqual(['load a {}', 'unload a', 'load b {}'])
    expect(waiting.heard.at(-1)).toBeNull()
    expect(waiting.heard).toContain('loading b (unloading a: least recently used, no job needs it)')
  })

  test('room for two: the second model loads beside the first', async () => {
    const { engine, manager } = setup(['a', 'b'], { budget: 2 })
    await manager.acquire(need('a'), open())
    await manager.acquire(need('b'), open())
    expect(engine.calls).toEqual(['load a {}', 'load b {}'])
  })

  test('no budget (no GPU, no --vram-gb): nothing is unloaded for room', async () => {
    const { engine, manager } = setup(['a', 'b'], { budget: null })
    ;(await manager.acquire(need('a', { vram: 80 }), open())).release(1)
    await manager.acquire(need('b', { vram: 80 }), open())
    expect(engine.calls).toEqual(['load a {}', 'load b {}'])
  })

  test('two jobs for one model share its load; loading_models names it meanwhile', async () => {
    const { engine, manager } = setup()
    engine.holdLoads('a')
    const first = manager.acquire(need('a', { job: 'j1' }), open())
    const second = manager.acquire(need('a', { job: 'j2' }), open())
    await engine.loadStarted('a')
    expect(manager.loading()).toEqual(['a'])
    engine.finish('a')
    const [l1, l2] = await Promise.all([first, second])
    expect([l1.name, l2.name]).toEqual(['a', 'a'])
    expect(engine.calls).toEqual(['load a {}'])
    expect(manager.loading()).toEqual([])
  })

  test('a model bigger than the whole budget: the job fails saying so, nothing is unloaded', async () => {
    const { engine, manager } = setup()
    await manager.acquire(need('a'), open())
    const e = await manager.acquire(need('b', { vram: 48 }), open()).catch((x) => x)
    expect(e).toBeInstanceOf(ModelUnavailable)
    expect(e.message).toBe('b needs 48 GB of VRAM, this worker has 1 GB')
    expect(engine.calls).toEqual(['load a {}'])
  })

  test('a model the engine does not have: the job fails', async () => {
    const { manager } = setup()
    const e = await manager.acquire(need('nope'), open()).catch((x) => x)
    expect(e).toBeInstanceOf(ModelUnavailable)
    expect(e.message).toBe('nope is not among the models of the engine')
  })

  test('a load that fails: the job fails with the engine’s reason; the model is not loaded here again for a while, each failure longer', async () => {
    const { engine, manager, timers } = setup()
    const reason = 'exit code 1: E llama_model_load: model is corrupted or incomplete'
    engine.holdLoads('a')
    const first = manager.acquire(need('a'), open())
    await engine.loadStarted('a')
    engine.fail('a', reason)
    const e = await first.catch((x) => x)
    expect(e).toBeInstanceOf(ModelUnavailable)
    expect(e.message).toBe(`a failed to load: ${reason}`)
    expect(manager.loading()).toEqual([])
    // The next job for it within a minute fails at once with that reason: no load is tried.
    timers.advance(30_000)
    const soon = await manager.acquire(need('a', { job: 'j2' }), open()).catch((x) => x)
    expect(soon).toBeInstanceOf(ModelUnavailable)
    expect(soon.message).toBe(
      `a failed to load on this worker 30 s ago (not tried again here for 30 s): ${reason}`,
    )
    expect(engine.calls).toEqual(['load a {}'])
    // Another model loads meanwhile.
    ;(await manager.acquire(need('b'), open())).release(1)
    // After the minute it is tried again; failing again, it waits two minutes.
    timers.advance(30_000)
    const again = manager.acquire(need('a', { job: 'j3' }), open())
    await engine.loadStarted('a')
    engine.fail('a', reason)
    await again.catch(() => {})
    timers.advance(90_000)
    expect((await manager.acquire(need('a', { job: 'j4' }), open()).catch((x) => x)).message).toStartWith(
      'a failed to load on this worker 90 s ago (not tried again here for 30 s)',
    )
    // A load that works starts the count over.
    timers.advance(30_000)
    const third = manager.acquire(need('a', { job: 'j5' }), open())
    await engine.loadStarted('a')
    engine.finish('a')
    expect((await third).name).toBe('a')
    expect(engine.calls.filter((c) => c.startsWith('load a'))).toHaveLength(3)
  })

  test('loaded with other params: loaded again once no job uses it; the same params are used as loaded', async () => {
    const { engine, manager } = setup()
    ;(await manager.acquire(need('a', { params: { ctx_size: 1024, embedding: true } }), open())).release(1)
    ;(await manager.acquire(need('a', { params: { embedding: true, ctx_size: 1024 } }), open())).release(1)
    expect(engine.calls).toEqual(['load a {"ctx_size":1024,"embedding":true}'])
    await manager.acquire(need('a', { params: { ctx_size: 2048 } }), open())
    expect(engine.calls).toEqual([
      'load a {"ctx_size":1024,"embedding":true}',
      'unload a',
      'load a {"ctx_size":2048}',
    ])
  })

  test('an attached engine: params are not passed on, and any loaded copy serves', async () => {
    const { engine, manager } = setup(['a'], { appliesParams: false })
    ;(await manager.acquire(need('a', { params: { ctx_size: 1024 } }), open())).release(1)
    await manager.acquire(need('a', { params: { ctx_size: 2048 } }), open())
    expect(engine.calls).toEqual(['load a {}'])
  })

  test('the engine dies under a job: its lease is lost with the engine’s account, and the model is not loaded any more', async () => {
    const { engine, manager } = setup()
    const lease = await manager.acquire(need('a'), open())
    engine.die('the engine was killed (SIGKILL); its last lines: bye')
    expect(lease.lost.aborted).toBe(true)
    expect(lease.lost.reason).toBeInstanceOf(ModelLost)
    expect(lease.lost.reason.message).toBe('the engine was killed (SIGKILL); its last lines: bye')
    expect(await lease.check()).toBe(lease.lost.reason)
    lease.release(0)
    // Loaded again for the next job.
    await manager.acquire(need('a'), open())
    expect(engine.calls).toEqual(['load a {}', 'load a {}'])
  })

  test('a model that went away without a word is found by the next look, and its job told with its last lines', async () => {
    const { engine, manager } = setup()
    const lease: ModelLease = await manager.acquire(need('a'), open())
    expect(await lease.check()).toBeNull()
    engine.drop('a')
    const why = await lease.check()
    expect(why).toBeInstanceOf(ModelLost)
    expect(why!.message).toBe("a is no longer loaded in the engine; the engine's last lines: last words of a")
    expect(lease.lost.aborted).toBe(true)
  })

  test('a job stopped while it waits: nothing is loaded for it', async () => {
    const { engine, manager } = setup()
    const a = await manager.acquire(need('a'), open())
    const stop = new AbortController()
    const waiting = stages((s) => s.startsWith('waiting'))
    const b = manager.acquire(need('b'), stop.signal, waiting.listen)
    await waiting.seen
    stop.abort(new Error('the server no longer assigns this job'))
    expect((await b.catch((x) => x)).message).toBe('the server no longer assigns this job')
    a.release(1)
    // The next job for a uses it as it is: b's wait left nothing behind.
    await manager.acquire(need('a'), open())
    expect(engine.calls).toEqual(['load a {}'])
  })

  test('what a load took and what a job got through are measured per model', async () => {
    const { engine, manager, timers } = setup()
    engine.holdLoads('a')
    const acquiring = manager.acquire(need('a'), open())
    await engine.loadStarted('a')
    timers.advance(2500)
    engine.finish('a')
    const lease = await acquiring
    timers.advance(4000)
    lease.release(20)
    expect(manager.stats()).toEqual([{ name: 'a', load_seconds: 2.5, requests_per_second: 5 }])
  })

  test('what each loaded model was loaded for is kept in the state directory for the next run', async () => {
    const state = new StateDir(mkdtempSync(join(root, 'state-')))
    const first = setup(['a', 'b'], { state })
    ;(await first.manager.acquire(need('a'), open())).release(1)
    // A daemon started again finds a loaded (an adopted engine): it knows a takes 1 GB.
    const engine: MemoryEngine = first.engine
    const next = new ModelManager({
      engine,
      state,
      room: async () => ({ budget_gb: 1 }),
      timers: manualTimers(),
    })
    await next.acquire(need('b'), open())
    expect(engine.calls).toEqual(['load a {}', 'unload a', 'load b {}'])
  })

  test('looks at the engine are shared, but a fresh one (after a model was placed) is never a look begun before it', async () => {
    const dir = mkdtempSync(join(root, 'models-'))
    const { engine, manager } = setup(['a'], { modelsDir: dir })
    const held = engine.holdStatus()
    const begunBefore = manager.refresh()
    await held.started
    // A download places c while that look (a heartbeat's) is under way.
    writeFileSync(join(dir, 'c.gguf'), 'weights of c')
    const shared = manager.refresh()
    const fresh = manager.refresh({ fresh: true })
    held.release()
    const names = async (view: Promise<EngineView>) => (await view).models.map((m) => m.name)
    expect(await names(begunBefore)).toEqual(['a'])
    expect(await names(shared)).toEqual(['a'])
    expect(await names(fresh)).toEqual(['a', 'c'])
  })

  test('an engine that cannot be reached: the job fails saying so', async () => {
    const { engine, manager } = setup()
    engine.offline = true
    const e = await manager.acquire(need('a'), open()).catch((x) => x)
    expect(e).toBeInstanceOf(ModelUnavailable)
    expect(e.message).toBe('the engine is offline: down')
  })

  test('GPUs: each load is placed on its GPU set, the driver read afresh after a change; the set is remembered and reported', async () => {
    const used = new Map<number, number>()
    const room = (): Room => ({
      gpus: [0, 1].map((index) => ({ index, total_gb: 24, free_gb: 24 - (used.get(index) ?? 0) })),
    })
    const state = new StateDir(mkdtempSync(join(root, 'state-')))
    const { engine, manager, reads } = setup(['a', 'b', 'c'], { gpus: room, engineName: 'vllm', state })
    const a = await manager.acquire(need('a', { vram: 20 }), open())
    used.set(0, 21)
    const b = await manager.acquire(need('b', { vram: 20 }), open())
    expect(engine.calls).toEqual([
      'load a {"gpu_memory_utilization":0.87} on 0',
      'load b {"gpu_memory_utilization":0.87} on 1',
    ])
    // Each placement read the driver afresh: the first, and b’s after a was loaded (a “use” reads nothing).
    expect(reads).toEqual([true, true])
    expect(manager.placements()).toEqual([
      { name: 'a', gpus: [0] },
      { name: 'b', gpus: [1] },
    ])
    // Both GPUs hold a model in use: none idle. Once b's job is done, GPU 1 is.
    expect(manager.idleGpu()).toBe(false)
    b.release(1)
    expect(manager.idleGpu()).toBe(true)
    expect(state.readJson<Record<string, { gpus: number[] }>>('models.json')).toMatchObject({
      a: { gpus: [0] },
      b: { gpus: [1] },
    })
    // c needs a GPU: b (idle) goes, a (in use) stays.
    used.set(1, 21)
    await manager.acquire(need('c', { vram: 20 }), open())
    expect(engine.calls.slice(2)).toEqual(['unload b', 'load c {"gpu_memory_utilization":0.87} on 1'])
    a.release(1)
  })

  test('loads on two GPUs run at once; with one budget, one at a time', async () => {
    const room = (): Room => ({
      gpus: [0, 1].map((index) => ({ index, total_gb: 24, free_gb: 24 })),
    })
    const gpus = setup(['a', 'b'], { gpus: room, engineName: 'vllm' })
    gpus.engine.holdLoads('a')
    gpus.engine.holdLoads('b')
    const a = gpus.manager.acquire(need('a', { vram: 20 }), open())
    await gpus.engine.loadStarted('a')
    const b = gpus.manager.acquire(need('b', { vram: 20 }), open())
    // b's load begins while a's goes on: another GPU.
    await gpus.engine.loadStarted('b')
    expect(gpus.manager.loading().sort()).toEqual(['a', 'b'])
    gpus.engine.finish('b')
    gpus.engine.finish('a')
    expect([(await a).name, (await b).name]).toEqual(['a', 'b'])
    expect(gpus.engine.calls).toEqual([
      'load a {"gpu_memory_utilization":0.87} on 0',
      'load b {"gpu_memory_utilization":0.87} on 1',
    ])

    const one = setup(['a', 'b'], { budget: 48 })
    one.engine.holdLoads('a')
    const first = one.manager.acquire(need('a', { vram: 20 }), open())
    await one.engine.loadStarted('a')
    const waiting = stages((x) => x.startsWith('waiting'))
    const second = one.manager.acquire(need('b', { vram: 20 }), open(), waiting.listen)
    expect(await waiting.seen).toBe('waiting for b: loading a first')
    expect(one.engine.calls).toEqual(['load a {}'])
    one.engine.finish('a')
    await first
    expect((await second).name).toBe('b')
  })
})
