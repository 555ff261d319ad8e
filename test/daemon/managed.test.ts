import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { tinyModel } from '../../scripts/llama-server'
import type { AgentEvent } from '../../src/daemon/agent'
import { DigestCache } from '../../src/daemon/runtimes/digests'
import { StateDir } from '../../src/daemon/state'
import type { TestServer } from '../helpers/app'
import type { RunningAgent } from '../helpers/daemon'
import { startGateProxy } from '../helpers/gate-proxy'
import { withRealEngine } from '../helpers/llama'
import {
  ENTRY,
  MULTI_SEEDS,
  managedFleet,
  managedOptions,
  routerModels as routerModelsAt,
  routersOf,
  runManaged,
  SEEDS,
  sha256 as sha,
  startManagedSetup,
  stopDaemon as stopped,
} from '../helpers/managed'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// A daemon that runs llama.cpp itself (docs/worker.md "Managed engines"): the real llama-server
// router from scripts/llama-server.ts, as the daemon's child, over a models directory of tiny
// generated GGUFs (each of its own seed, so each of its own sha256), and the real control plane
// with catalogue entries pinned to those digests (test/helpers/managed.ts). What is asserted is
// what the router, the batch and the worker row say — never how long anything took.

withRealEngine('a daemon that runs llama.cpp itself', (engine) => {
  let server: TestServer
  let modelsDir: string
  const dir = mkdtempSync(join(tmpdir(), 'gk-managed-'))

  beforeAll(async () => {
    // info: the daemon's account of what it loads and why is part of what is tested.
    ;({ server, modelsDir } = await startManagedSetup(dir, { LOG_LEVEL: 'info' }))
  })

  afterAll(async () => {
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  const fleet = () => managedFleet(server)
  const routerModels = (d: RunningAgent) => routerModelsAt(d.agent.runtime.baseUrl)
  const daemon = (
    serverUrl: string,
    key: string,
    o: Parameters<typeof managedOptions>[4] = {},
    onEvent?: (e: AgentEvent) => void,
  ) => runManaged(managedOptions(serverUrl, key, engine, modelsDir, o), onEvent)

  test('one daemon runs A, then B, then A again: each loaded for its batch, the other unloaded to fit one model’s VRAM, params on the engine', async () => {
    const f = await fleet()
    const d = daemon(server.url, f.key)
    try {
      // Every GGUF is in the inventory with its digest, on disk, before anything loads.
      const before = await until('the models hashed and listed', async () => {
        const m = await f.models(d.agent.id)
        return m.alpha?.state === 'on_disk' && m.beta?.state === 'on_disk' ? m : null
      })
      expect(before.alpha.digest).toBe(sha(tinyModel(SEEDS.alpha)))
      // A model that is a directory: its weights are its item, its other files `<name>+<file>`.
      expect(before.multi).toMatchObject({ state: 'on_disk', digest: sha(tinyModel(MULTI_SEEDS.weights)) })
      expect(before['multi+mmproj-tiny.gguf']).toMatchObject({
        state: 'on_disk',
        digest: sha(tinyModel(MULTI_SEEDS.mmproj)),
      })
      const rows = await until('the worker row', async () =>
        (
          await server.req('GET', `/v1/orgs/${f.user.personalOrgId}/workers`, { token: f.user.token })
        ).body.data.find((w: any) => w.id === d.agent.id),
      )
      expect(rows.capabilities).toEqual({ shards: true, loads: true })

      for (const [round, model] of [
        [1, 'alpha'],
        [2, 'beta'],
        [3, 'alpha'],
      ] as const) {
        const other = model === 'alpha' ? 'beta' : 'alpha'
        const id = await f.submit(ENTRY[model], 6)
        const batch = await f.completed(id)
        expect(batch.request_counts).toEqual({ total: 6, completed: 6, failed: 0 })
        for (const line of await f.outputLines(batch)) expect(line.response.body.model).toBe(model)
        // The router's own status: this one loaded with its profile's params, the other unloaded.
        const router = await routerModels(d)
        expect(router[model]!.value).toBe('loaded')
        expect(router[other]!.value).toBe('unloaded')
        const ctx = router[model]!.args[router[model]!.args.indexOf('--ctx-size') + 1]
        expect(ctx).toBe(model === 'alpha' ? '1024' : '2048')
        expect(router[model]!.args).toContain('--threads')
        // The worker row says the same, with what the daemon measured: a heartbeat sent while the
        // job ran shows the model loaded before its rate was measured, so wait for one with both.
        const seen = await until(`round ${round} in the worker row`, async () => {
          const m = await f.models(d.agent.id)
          const measured = typeof m[model]?.requests_per_second === 'number'
          return m[model]?.state === 'loaded' && m[other]?.state === 'on_disk' && measured ? m : null
        })
        expect(seen[model].load_seconds).toBeGreaterThan(0)
        expect(seen[model].requests_per_second).toBeGreaterThan(0)
        if (round === 2) {
          // Loading B unloaded A, and the daemon said why.
          const said = capturedLogLines().some((l) =>
            l.includes(`loading beta for job ${id} (unloading alpha: least recently used, no job needs it)`),
          )
          expect(said).toBe(true)
        }
      }
    } finally {
      await stopped(d)
    }
    // The engine stopped with the daemon.
    expect(routersOf(d.agent.state.dir)).toEqual([])
  })

  test('a GGUF copied into the models directory while the daemon runs is in its inventory, with its digest', async () => {
    const f = await fleet()
    const d = daemon(server.url, f.key)
    try {
      await until('registered', async () => (await f.models(d.agent.id)).alpha?.state === 'on_disk')
      const bytes = tinyModel(17)
      writeFileSync(join(modelsDir, 'delta.gguf.part'), bytes)
      renameSync(join(modelsDir, 'delta.gguf.part'), join(modelsDir, 'delta.gguf'))
      const m = await until('delta in the worker row', async () => (await f.models(d.agent.id)).delta)
      expect(m).toMatchObject({ state: 'on_disk', digest: sha(bytes) })
      expect((await routerModels(d)).delta!.value).toBe('unloaded')
    } finally {
      await stopped(d)
      rmSync(join(modelsDir, 'delta.gguf'), { force: true })
    }
  })

  test('room for two: a job for B while A’s job is still on the worker loads B beside A, both jobs held at once', async () => {
    const f = await fleet()
    const proxy = startGateProxy(server.url)
    // Results uploads wait: a job stays on the worker after its last request is answered.
    proxy.hold('uploads', (method, path) => method === 'POST' && path === '/workers/upload-results')
    const d = daemon(proxy.url, f.key, { vram_gb: 2 })
    try {
      const a = await f.submit(ENTRY.alpha, 3)
      await until('A’s upload waiting', () => proxy.waiting('uploads') === 1)
      const b = await f.submit(ENTRY.beta, 3)
      await until('B’s upload waiting', () => proxy.waiting('uploads') === 2)
      // Both jobs on the worker, both models loaded: B did not unload A.
      expect(
        d.agent
          .jobViews()
          .map((v) => v.model)
          .sort(),
      ).toEqual(['alpha', 'beta'])
      const router = await routerModels(d)
      expect(router.alpha!.value).toBe('loaded')
      expect(router.beta!.value).toBe('loaded')
      await until('both loaded in the worker row', async () => {
        const m = await f.models(d.agent.id)
        return m.alpha?.state === 'loaded' && m.beta?.state === 'loaded'
      })
      proxy.release('uploads')
      for (const id of [a, b]) expect((await f.completed(id)).request_counts.failed).toBe(0)
    } finally {
      await stopped(d)
      await proxy.stop()
    }
  })

  test('a corrupt GGUF: the attempt fails with the engine’s reason, the model is not loaded here again for a while — its polls say so, so its batch waits for another worker — while a batch for another model runs', async () => {
    const f = await fleet()
    const d = daemon(server.url, f.key)
    const from = capturedLogLines().length
    let broken = ''
    try {
      broken = await f.submit(ENTRY.broken, 2)
      const first = await until('the first attempt reported', async () => {
        const b = await f.batch(broken)
        return b.attempts >= 1 ? b : null
      })
      expect(first.error).toMatch(/^broken failed to load: exit code 1/)
      expect(first.error).toContain('model is corrupted or incomplete')
      // A batch created after it runs: the daemon polled again, naming broken in failed_models, and
      // the older batch was not handed back to it.
      const ok = await f.completed(await f.submit(ENTRY.alpha, 3))
      expect(ok.request_counts.completed).toBe(3)
      expect(await f.batch(broken)).toMatchObject({ status: 'validated', attempts: 1, error: first.error })
      const loads = capturedLogLines()
        .slice(from)
        .filter((l) => l.includes('"msg":"loading broken for job'))
      expect(loads).toHaveLength(1)
      expect((await routerModels(d)).broken!.value).toBe('unloaded')
    } finally {
      await stopped(d)
      // Batches are the whole server's: the next test's daemon would take it.
      if (broken) {
        const { db, tables } = rowsOf(server.deps)
        await db.delete(tables.batches).where(eq(tables.batches.id, broken))
      }
    }
  })

  test('a model needing more VRAM than the worker has: the job fails saying so and the batch waits for a bigger worker', async () => {
    const f = await fleet()
    // The server hands such a batch only to a worker that has not heartbeated yet (docs/api.md §7
    // Poll rule 2): the first heartbeat waits, and the models are hashed beforehand so that the
    // registration already advertises them (Poll rule 6).
    const proxy = startGateProxy(server.url)
    proxy.hold(
      'heartbeats',
      (method, path) => method === 'POST' && /^\/workers\/[^/]+\/heartbeat$/.test(path),
    )
    const stateDir = mkdtempSync(join(tmpdir(), 'gk-worker-'))
    const cache = new DigestCache(new StateDir(stateDir))
    for (const f of readdirSync(modelsDir)) await cache.digest(join(modelsDir, f))
    const gamma = await f.submit(ENTRY.gamma, 2)
    const d = daemon(proxy.url, f.key, { state_dir: stateDir }, (e) => {
      // The first failure reported: no more polls until the server knows this worker's VRAM.
      if (e.type === 'job_ended')
        proxy.hold('polls', (method, path) => method === 'POST' && path === '/workers/poll')
    })
    try {
      const ended = await d.next('job_ended')
      expect(ended.outcome).toBe('failed')
      const b = await f.batch(gamma)
      expect(b).toMatchObject({ status: 'validated', attempts: 1 })
      expect(b.error).toBe('gamma needs 100 GB of VRAM, this worker has 1 GB')
      expect((await routerModels(d)).gamma!.value).toBe('unloaded')
      proxy.release('heartbeats')
      await d.next('heartbeat', (e) => e.ok)
      proxy.release('polls')
      const ok = await f.completed(await f.submit(ENTRY.beta, 2))
      expect(ok.request_counts.completed).toBe(2)
      // Never claimed again by this worker, which the server now knows has 1 GB.
      expect(await f.batch(gamma)).toMatchObject({ status: 'validated', attempts: 1 })
    } finally {
      await stopped(d)
      await proxy.stop()
      const { db, tables } = rowsOf(server.deps)
      await db.delete(tables.batches).where(eq(tables.batches.id, gamma))
    }
  })
})
