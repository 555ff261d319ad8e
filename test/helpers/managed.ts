import { expect } from 'bun:test'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { type Engine, tinyModel } from '../../scripts/llama-server'
import type { AgentEvent } from '../../src/daemon/agent'
import type { DaemonOptions } from '../../src/daemon/options'
import { startTestServer, type TestServer } from './app'
import { makeUser, makeWorkerKey } from './builders'
import { daemonOptions, fastDeps, type RunningAgent, runAgent } from './daemon'
import { capturedLogLines } from './secrets'
import { until } from './until'

// For tests of a daemon that runs llama.cpp itself (docs/worker.md "Managed engines"): a models
// directory of tiny generated GGUFs, each of its own seed (so each of its own sha256), one cut
// short (a corrupt file), a catalogue pinned to their digests with llama.cpp serving profiles, the
// real control plane, and the views a test reads: the batch, the worker row's models[], the
// router's own GET /models, the routers running for a state directory.

export const SEEDS = { alpha: 11, beta: 12, gamma: 13 } as const
/** The files of `multi/`, a model that is a directory. */
export const MULTI_SEEDS = { weights: 15, mmproj: 16 } as const
export const ENTRY = {
  alpha: 'tiny-alpha-f32',
  beta: 'tiny-beta-f32',
  gamma: 'tiny-gamma-f32',
  broken: 'tiny-broken-f32',
} as const

export const sha256 = (b: Uint8Array) => new Bun.CryptoHasher('sha256').update(b).digest('hex')

export interface ManagedSetup {
  server: TestServer
  modelsDir: string
}

/**
 * Writes the models into `<dir>/models` and the catalogue, and starts the control plane. alpha
 * (ctx_size 1024) and beta (ctx_size 2048) need 1 GB, gamma 100 GB; every profile runs 1 thread.
 * `multi/` (weights and a projector) and `broken.gguf` (cut short) are there too.
 */
export async function startManagedSetup(
  dir: string,
  env: Record<string, string> = {},
): Promise<ManagedSetup> {
  const modelsDir = join(dir, 'models')
  mkdirSync(modelsDir, { recursive: true })
  const digests: Record<string, string> = {}
  for (const [name, seed] of Object.entries(SEEDS)) {
    const bytes = tinyModel(seed)
    writeFileSync(join(modelsDir, `${name}.gguf`), bytes)
    digests[name] = sha256(bytes)
  }
  // A model of several files: a directory named after it (its weights, and a projector).
  mkdirSync(join(modelsDir, 'multi'))
  writeFileSync(join(modelsDir, 'multi', 'multi-weights.gguf'), tinyModel(MULTI_SEEDS.weights))
  writeFileSync(join(modelsDir, 'multi', 'mmproj-tiny.gguf'), tinyModel(MULTI_SEEDS.mmproj))
  // Cut short: llama.cpp reads its header, then finds its tensors outside the file.
  const broken = tinyModel(14).subarray(0, 100_000)
  writeFileSync(join(modelsDir, 'broken.gguf'), broken)
  digests.broken = sha256(broken)
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
  const server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'warn', ...env })
  return { server, modelsDir }
}

/** A user with a worker key of their own org, and what they see. */
export async function managedFleet(server: TestServer) {
  const user = await makeUser(server)
  const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
  const get = async (path: string) => (await server.req('GET', path, { token: user.token })).body
  return {
    user,
    key,
    batch: (id: string) => get(`/v1/batches/${id}`),
    /** The worker row (docs/api.md §7 "Worker row"). */
    async row(workerId: string | null): Promise<any> {
      return (await get(`/v1/orgs/${user.personalOrgId}/workers`)).data.find((w: any) => w.id === workerId)
    },
    /** The worker row's models[] by name. */
    async models(workerId: string | null): Promise<Record<string, any>> {
      const row = await this.row(workerId)
      return Object.fromEntries((row?.models ?? []).map((m: any) => [m.name, m]))
    },
    /** Uploads `n` chat lines for the catalogue entry and creates the batch. */
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
      form.append('file', new Blob([`${lines.map((l) => JSON.stringify(l)).join('\n')}\n`]), 'input.jsonl')
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
      const res = await server.req('GET', `/v1/files/${batch.output_file_id}/content`, { token: user.token })
      return res.text
        .split('\n')
        .filter(Boolean)
        .map((l: string) => JSON.parse(l))
    },
    async completed(id: string, ms?: number) {
      return until(
        `batch ${id} completed`,
        async () => {
          const b = await get(`/v1/batches/${id}`)
          if (b.status === 'failed') throw new Error(`batch failed: ${b.error}`)
          return b.status === 'completed' ? b : null
        },
        ms,
      )
    },
  }
}

/** The options of a daemon running the router of `engine` on `modelsDir`, with 1 GB of VRAM. */
export function managedOptions(
  serverUrl: string,
  key: string,
  engine: Engine,
  modelsDir: string,
  o: Partial<DaemonOptions> = {},
): DaemonOptions {
  return daemonOptions(serverUrl, key, '', {
    runtime: 'llama.cpp',
    engine: 'llama.cpp',
    models_dir: modelsDir,
    llama_server: engine.router,
    vram_gb: 1,
    concurrency: 4,
    log_level: 'info',
    ...o,
  })
}

export const runManaged = (opts: DaemonOptions, onEvent?: (e: AgentEvent) => void) =>
  runAgent(opts, fastDeps(onEvent ? { onEvent } : {}))

export async function stopDaemon(d: RunningAgent) {
  d.agent.shutdown(true)
  expect(await d.done).toBe(0)
}

/**
 * The error the daemon reported for the first failed attempt of job `jobId` (its `job failed;
 * reporting` log line). The batch's own `error` is its latest attempt's: the server may hand the
 * batch straight back to the same worker, whose next attempt fails at once for another reason
 * (the model's load cooldown, docs/worker.md "Faults") before a test reads the batch.
 */
export function firstFailure(jobId: string): Promise<string> {
  return until(`the first failure of ${jobId} reported`, () => {
    for (const l of capturedLogLines()) {
      if (!l.includes('"msg":"job failed; reporting"') || !l.includes(jobId)) continue
      const r = JSON.parse(l)
      if (r.job_id === jobId) return r.error as string
    }
    return null
  })
}

/** The router's own view: GET /models of the engine at `url`, status by model. */
export async function routerModels(url: string): Promise<Record<string, { value: string; args: string[] }>> {
  const res = (await (await fetch(`${url}/models`)).json()) as any
  return Object.fromEntries(res.data.map((m: any) => [m.id, m.status]))
}

/** The pids of the llama-server routers running with `stateDir`'s preset file (read from /proc). */
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
