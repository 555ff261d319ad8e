import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DigestCache } from '../../src/daemon/runtimes/digests'
import { ManagedRuntime } from '../../src/daemon/runtimes/managed'
import { StateDir } from '../../src/daemon/state'
import { startTestServer, type TestServer } from '../helpers/app'
import { daemonOptions, fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { type FakeRuntime, startFakeRuntime } from '../helpers/fake-runtime'
import { managedFleet, sha256 } from '../helpers/managed'
import { type MemoryEngine, memoryEngine } from '../helpers/memory-engine'
import { until } from '../helpers/until'

// The agent with a managed engine (docs/worker.md "Managed engines"), at moments the test picks:
// the engine is held in memory (test/helpers/memory-engine.ts: a load lasts until the test ends
// it), requests go to a stand-in runtime that holds chosen requests, and the control plane is the
// real one. What an admin sees — the worker row's models[] and their state — is read from the
// server; what the operator sees — the job's stage on the status line — from the agent.

const root = mkdtempSync(join(tmpdir(), 'gk-managed-agent-'))
let server: TestServer
const files: Record<string, string[]> = {}

beforeAll(async () => {
  const entries: string[] = ['models:']
  for (const name of ['a', 'b']) {
    const path = join(root, `${name}.gguf`)
    const bytes = new TextEncoder().encode(`weights of ${name}`)
    writeFileSync(path, bytes)
    files[name] = [path]
    entries.push(
      `  - id: model-${name}-f32`,
      `    display_name: Model ${name}`,
      '    task_type: chat',
      '    quantization: F32',
      '    vram_gb: 1',
      `    digest: sha256:${sha256(bytes)}`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${name}`,
    )
  }
  writeFileSync(join(root, 'models.yaml'), entries.join('\n'))
  server = await startTestServer({ CATALOGUE_PATH: join(root, 'models.yaml'), LOG_LEVEL: 'warn' })
})

afterAll(async () => {
  await server?.stop()
  rmSync(root, { recursive: true, force: true })
})

let cleanups: (() => unknown)[] = []
const cleanup = async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
}

/** A daemon whose engine is `engine` (its requests served by `rt`), with `vram` GB to fill. */
async function setup(o: { vram: number; hold?: (body: any) => Promise<void> | undefined }) {
  const f = await managedFleet(server)
  const rt: FakeRuntime = startFakeRuntime({ models: ['a', 'b'], hold: o.hold })
  const engine: MemoryEngine = memoryEngine(['a', 'b'], { files, baseUrl: rt.url })
  const opts = daemonOptions(server.url, f.key, rt.url, {
    runtime: 'llama.cpp',
    engine: 'llama.cpp',
    vram_gb: o.vram,
  })
  const state = new StateDir(opts.state_dir)
  const runtime = new ManagedRuntime(engine, new DigestCache(state), {
    state,
    room: async () => ({ budget_gb: o.vram ?? null }),
  })
  const d: RunningAgent = runAgent(opts, fastDeps({ runtime }))
  cleanups.push(
    async () => {
      d.agent.shutdown(true)
      await d.done
    },
    () => rt.stop(),
  )
  await until('the models advertised', async () => {
    const m = await f.models(d.agent.id)
    return m.a?.state === 'on_disk' && m.b?.state === 'on_disk'
  })
  return { f, rt, engine, d }
}

describe('the agent with a managed engine', () => {
  test('while a model loads for a job, the worker row says loading and the job’s stage says so; then loaded, with its load time', async () => {
    try {
      const { f, engine, d } = await setup({ vram: 1 })
      engine.holdLoads('a')
      const id = await f.submit('model-a-f32', 3)
      await engine.loadStarted('a')
      // The heartbeat's loading_models, as the Workers page reads it.
      await until(
        'loading in the worker row',
        async () => (await f.models(d.agent.id)).a?.state === 'loading',
      )
      expect(d.agent.jobViews().map((v) => v.stage)).toEqual(['loading a'])
      engine.finish('a')
      expect((await f.completed(id)).request_counts.completed).toBe(3)
      const m = await until('loaded in the worker row', async () => {
        const models = await f.models(d.agent.id)
        return models.a?.state === 'loaded' && models.a.requests_per_second !== null ? models : null
      })
      expect(m.a.load_seconds).toBeGreaterThanOrEqual(0)
      expect(m.b.state).toBe('on_disk')
    } finally {
      await cleanup()
    }
  })

  test('room for two: B’s job loads and runs while A’s requests are still in flight', async () => {
    let releaseA = () => {}
    const aHeld = new Promise<void>((r) => {
      releaseA = r
    })
    try {
      const { f, engine, d } = await setup({
        vram: 2,
        hold: (body) => (body.model === 'a' ? aHeld : undefined),
      })
      const a = await f.submit('model-a-f32', 2)
      await until('A’s requests in flight', () =>
        d.agent.jobViews().some((v) => v.model === 'a' && v.stage === null),
      )
      const b = await f.submit('model-b-f32', 2)
      expect((await f.completed(b)).request_counts.completed).toBe(2)
      // A is still running: its requests are held at the engine.
      expect((await f.batch(a)).status).toBe('in_progress')
      expect(engine.calls).toEqual(['load a {}', 'load b {}'])
      const m = await until('both loaded in the worker row', async () => {
        const models = await f.models(d.agent.id)
        return models.a?.state === 'loaded' && models.b?.state === 'loaded'
      })
      expect(m).toBe(true)
      releaseA()
      expect((await f.completed(a)).request_counts.completed).toBe(2)
    } finally {
      releaseA()
      await cleanup()
    }
  })

  test('room for one: B’s job waits for A’s requests to end, then A is unloaded and B loaded', async () => {
    let releaseA = () => {}
    const aHeld = new Promise<void>((r) => {
      releaseA = r
    })
    try {
      const { f, engine, d } = await setup({
        vram: 1,
        hold: (body) => (body.model === 'a' ? aHeld : undefined),
      })
      const a = await f.submit('model-a-f32', 2)
      await until('A’s requests in flight', () =>
        d.agent.jobViews().some((v) => v.model === 'a' && v.stage === null),
      )
      const b = await f.submit('model-b-f32', 2)
      const stage = await until('B waiting', () => d.agent.jobViews().find((v) => v.model === 'b')?.stage)
      expect(stage).toBe('waiting for b: b needs 1 GB, 0 GB free of 1 GB (a in use by 1 job)')
      // Nothing unloaded under A.
      expect(engine.calls).toEqual(['load a {}'])
      releaseA()
      const [doneA, doneB] = [await f.completed(a), await f.completed(b)]
      expect(doneA.request_counts).toEqual({ total: 2, completed: 2, failed: 0 })
      expect(doneB.request_counts).toEqual({ total: 2, completed: 2, failed: 0 })
      expect(engine.calls).toEqual(['load a {}', 'unload a', 'load b {}'])
    } finally {
      releaseA()
      await cleanup()
    }
  })
})

describe('the inventory of a managed engine', () => {
  test('a model is advertised once every one of its files is hashed: its weights under its name, the others as <name>+<file>', async () => {
    const dir = mkdtempSync(join(root, 'inv-'))
    const weights = join(dir, 'w.gguf')
    const projector = join(dir, 'mmproj-x.gguf')
    writeFileSync(weights, 'the weights')
    writeFileSync(projector, 'the projector')
    const state = new StateDir(join(dir, 'state'))
    const digests = new DigestCache(state)
    const engine = memoryEngine(['vis'], { files: { vis: [weights, projector] } })
    const runtime = new ManagedRuntime(engine, digests, { state, room: async () => ({ budget_gb: null }) })
    // Nothing hashed yet: hashing starts, nothing is advertised (by name alone it could match an
    // entry pinned to other weights).
    const first = await runtime.snapshot()
    expect(first).toMatchObject({ status: 'online', models: [], inventory: [], loaded: [] })
    await Promise.all([digests.digest(weights), digests.digest(projector)])
    const second = await runtime.snapshot()
    expect(second.models).toEqual(['vis'])
    expect(second.inventory).toEqual([
      {
        local_name: 'vis',
        sha256: sha256(new TextEncoder().encode('the weights')),
        size_bytes: 11,
        loaded: false,
        runtime: 'llama.cpp',
      },
      {
        local_name: 'vis+mmproj-x.gguf',
        sha256: sha256(new TextEncoder().encode('the projector')),
        size_bytes: 13,
        loaded: false,
        runtime: 'llama.cpp',
      },
    ])
    // Loaded is the engine's word.
    await engine.load('vis', {}, { gpus: null })
    const third = await runtime.snapshot()
    expect(third.loaded).toEqual(['vis'])
    expect(third.inventory.every((i) => i.loaded)).toBe(true)
  })

  test('an engine that cannot be reached: offline, nothing advertised', async () => {
    const dir = mkdtempSync(join(root, 'off-'))
    const state = new StateDir(dir)
    const engine = memoryEngine(['a'])
    engine.offline = true
    const runtime = new ManagedRuntime(engine, new DigestCache(state), {
      state,
      room: async () => ({ budget_gb: null }),
    })
    expect(await runtime.snapshot()).toEqual({
      status: 'offline',
      inventory: [],
      models: [],
      loaded: [],
      error: 'down',
    })
  })
})
