import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { tinyModel } from '../../scripts/llama-server'
import type { AgentEvent } from '../../src/daemon/agent'
import { DigestCache } from '../../src/daemon/runtimes/digests'
import { StateDir } from '../../src/daemon/state'
import { startTestServer, type TestServer } from '../helpers/app'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import { daemonOptions, fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { startGateProxy } from '../helpers/gate-proxy'
import { withRealEngine } from '../helpers/llama'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// A daemon that runs llama.cpp itself (docs/worker.md "Managed engines"): the real llama-server
// router from scripts/llama-server.ts, as the daemon's child, over a models directory of tiny
// generated GGUFs (each of its own seed, so each of its own sha256), and the real control plane
// with catalogue entries pinned to those digests. What is asserted is what the router, the batch
// and the worker row say — never how long anything took.

const SEEDS = { alpha: 11, beta: 12, gamma: 13 }
const ENTRY = {
  alpha: 'tiny-alpha-f32',
  beta: 'tiny-beta-f32',
  gamma: 'tiny-gamma-f32',
  broken: 'tiny-broken-f32',
}

withRealEngine('a daemon that runs llama.cpp itself', (engine) => {
  let server: TestServer
  const dir = mkdtempSync(join(tmpdir(), 'gk-managed-'))
  const modelsDir = join(dir, 'models')
  const sha = (b: Uint8Array) => new Bun.CryptoHasher('sha256').update(b).digest('hex')

  beforeAll(async () => {
    mkdirSync(modelsDir)
    const digests: Record<string, string> = {}
    for (const [name, seed] of Object.entries(SEEDS)) {
      const bytes = tinyModel(seed)
      writeFileSync(join(modelsDir, `${name}.gguf`), bytes)
      digests[name] = sha(bytes)
    }
    // Cut short: llama.cpp reads its header, then finds the tensors outside the file.
    const broken = tinyModel(14).subarray(0, 100_000)
    writeFileSync(join(modelsDir, 'broken.gguf'), broken)
    digests.broken = sha(broken)
    const entry = (name: keyof typeof ENTRY, vram: number, params: string[]) => [
      `  - id: ${ENTRY[name]}`,
      `    display_name: Tiny ${name}`,
      '    task_type: chat',
      '    quantization: F32',
      `    vram_gb: ${vram}`,
      `    digest: sha256:${digests[name]}`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${name}`,
      '        params:',
      '          threads: 1',
      ...params.map((p) => `          ${p}`),
    ]
    const manifest = join(dir, 'models.yaml')
    writeFileSync(
      manifest,
      [
        'models:',
        ...entry('alpha', 1, ['ctx_size: 1024']),
        ...entry('beta', 1, ['ctx_size: 2048']),
        ...entry('gamma', 100, []),
        ...entry('broken', 1, []),
      ].join('\n'),
    )
    // info: the daemon's account of what it loads and why is part of what is tested.
    server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'info' })
  })

  afterAll(async () => {
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  /** A user with a worker key of their own org, and their views. */
  async function fleet() {
    const user = await makeUser(server)
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const get = async (path: string) => (await server.req('GET', path, { token: user.token })).body
    return {
      user,
      key,
      batch: (id: string) => get(`/v1/batches/${id}`),
      /** The worker row's models[] by name (docs/api.md §7 "Worker row"). */
      async models(workerId: string | null): Promise<Record<string, any>> {
        const row = (await get(`/v1/orgs/${user.personalOrgId}/workers`)).data.find(
          (w: any) => w.id === workerId,
        )
        return Object.fromEntries((row?.models ?? []).map((m: any) => [m.name, m]))
      },
      async submit(model: string, n: number, extra: object = {}): Promise<string> {
        const lines = Array.from({ length: n }, (_, i) => ({
          custom_id: `r-${i}`,
          method: 'POST',
          url: '/v1/chat/completions',
          body: {
            model,
            messages: [{ role: 'user', content: `Say ${i}` }],
            max_tokens: 4,
            temperature: 0,
            ...extra,
          },
        }))
        const form = new FormData()
        form.append('purpose', 'batch')
        form.append('file', new Blob([lines.map((l) => JSON.stringify(l)).join('\n') + '\n']), 'input.jsonl')
        const file = await server.req('POST', '/v1/files', { token: user.token, raw: form })
        expect(file.status).toBe(200)
        const created = await server.req('POST', '/v1/batches', {
          token: user.token,
          body: { input_file_id: file.body.id, endpoint: '/v1/chat/completions' },
        })
        expect(created.status).toBe(200)
        return created.body.id
      },
      async outputLines(batch: any): Promise<any[]> {
        const res = await server.req('GET', `/v1/files/${batch.output_file_id}/content`, {
          token: user.token,
        })
        return res.text
          .split('\n')
          .filter(Boolean)
          .map((l: string) => JSON.parse(l))
      },
      async completed(id: string) {
        return until(`batch ${id} completed`, async () => {
          const b = await get(`/v1/batches/${id}`)
          if (b.status === 'failed') throw new Error(`batch failed: ${b.error}`)
          return b.status === 'completed' ? b : null
        })
      },
    }
  }

  /** The router's own view: GET /models of the daemon's engine. */
  async function routerModels(d: RunningAgent): Promise<Record<string, { value: string; args: string[] }>> {
    const res = (await (await fetch(`${d.agent.runtime.baseUrl}/models`)).json()) as any
    return Object.fromEntries(res.data.map((m: any) => [m.id, m.status]))
  }

  const daemon = (
    serverUrl: string,
    key: string,
    o: Parameters<typeof daemonOptions>[3] = {},
    onEvent?: (e: AgentEvent) => void,
  ) =>
    runAgent(
      daemonOptions(serverUrl, key, '', {
        runtime: 'llama.cpp',
        engine: 'llama.cpp',
        models_dir: modelsDir,
        llama_server: engine.router,
        vram_gb: 1,
        concurrency: 4,
        log_level: 'info',
        ...o,
      }),
      fastDeps(onEvent ? { onEvent } : {}),
    )

  async function stopped(d: RunningAgent) {
    d.agent.shutdown(true)
    expect(await d.done).toBe(0)
  }

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
        // The worker row says the same, with what the daemon measured.
        const seen = await until(`round ${round} in the worker row`, async () => {
          const m = await f.models(d.agent.id)
          return m[model]?.state === 'loaded' && m[other]?.state === 'on_disk' ? m : null
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

  test('a corrupt GGUF: each attempt fails with the engine’s reason and the batch is requeued, while a batch for another model runs', async () => {
    const f = await fleet()
    const d = daemon(server.url, f.key)
    try {
      const broken = await f.submit(ENTRY.broken, 2)
      // Three attempts, each reported with why the engine would not load it.
      const failed = await until('the corrupt model’s batch failed for good', async () => {
        const b = await f.batch(broken)
        return b.status === 'failed' ? b : null
      })
      expect(failed.attempts).toBe(3)
      expect(failed.error).toContain('broken failed to load: exit code 1')
      expect(failed.error).toContain('model is corrupted or incomplete')
      const ok = await f.completed(await f.submit(ENTRY.alpha, 3))
      expect(ok.request_counts.completed).toBe(3)
      expect((await routerModels(d)).broken!.value).toBe('unloaded')
    } finally {
      await stopped(d)
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

/** The pids of llama-server routers running with `stateDir`'s preset file (/proc). */
export function routersOf(stateDir: string): number[] {
  const preset = join(stateDir, 'engines', 'llama-router.ini')
  const out: number[] = []
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      const i = argv.indexOf('--models-preset')
      if (i >= 0 && argv[i + 1] === preset) out.push(Number(pid))
    } catch {}
  }
  return out
}
