import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runOnce as sweep } from '../../src/services/sweeper'
import { startTestServer, type TestServer } from '../helpers/app'
import { type MadeUser, makeUser, makeWorkerKey } from '../helpers/builders'
import { ownProcess } from '../helpers/children'
import { chatLines, daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { type FakeRuntime, startFakeRuntime } from '../helpers/fake-runtime'
import { capturedLogLines, captureLogLine } from '../helpers/secrets'
import { until } from '../helpers/until'

// The reference daemon against the REAL control plane: catalogue seeded from a manifest, input
// uploaded and validated through /v1/files and /v1/batches, the daemon speaking /workers, results
// read back through the output and error files. The runtime is the stand-in of
// test/helpers/fake-runtime.ts. Time-outs are driven by the server's manual clock and one sweeper
// pass, never by waiting 120 s.

const SLUG = 'e2e-chat-model-q4km'
const RUNTIME_MODEL = 'e2e/runtime-model-q4'
// An entry no worker hosts yet: served by ollama, pinned to its weights blob, small enough to pull.
const PULLED_SLUG = 'e2e-pulled-model-q4km'
const PULLED_TAG = 'e2e-pull:0.5b'
const PULLED_WEIGHTS = 'a1'.repeat(32)
// An Ollama entry whose profile sets Ollama's options (docs/worker.md "Ollama").
const CTX_SLUG = 'e2e-ctx-model-q4km'
const CTX_TAG = 'e2e-ctx:1b'
const CLI = join(import.meta.dir, '../../src/daemon/cli.ts')

let server: TestServer
let user: MadeUser
let key: string
const dir = mkdtempSync(join(tmpdir(), 'gk-e2e-'))

beforeAll(async () => {
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    [
      'models:',
      `  - id: ${SLUG}`,
      '    display_name: E2E chat model',
      '    task_type: chat',
      '    quantization: Q4_K_M',
      '    vram_gb: 4',
      '    size_gb: 1',
      '    serving_profiles:',
      '      - runtime: openai',
      `        runtime_model_id: ${RUNTIME_MODEL}`,
      `  - id: ${PULLED_SLUG}`,
      '    display_name: E2E pulled model',
      '    task_type: chat',
      '    quantization: Q4_K_M',
      '    vram_gb: 2',
      '    size_gb: 0.4',
      `    digest: sha256:${PULLED_WEIGHTS}`,
      '    serving_profiles:',
      '      - runtime: ollama',
      `        runtime_model_id: "${PULLED_TAG}"`,
      `  - id: ${CTX_SLUG}`,
      '    task_type: chat',
      '    quantization: Q4_K_M',
      '    serving_profiles:',
      '      - runtime: ollama',
      `        runtime_model_id: "${CTX_TAG}"`,
      '        params: { num_ctx: 8192, temperature: 0.3, keep_alive: 1h }',
    ].join('\n'),
  )
  server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'info' })
  user = await makeUser(server)
  key = (await makeWorkerKey(server, user, user.personalOrgId)).key
})

afterAll(async () => {
  await server.stop()
  rmSync(dir, { recursive: true, force: true })
})

const getBatch = async (id: string) =>
  (await server.req('GET', `/v1/batches/${id}`, { token: user.token })).body

/** Uploads the lines through /v1/files, creates the batch and waits until it is validated. */
async function submit(lines: string[]): Promise<string> {
  const form = new FormData()
  form.append('purpose', 'batch')
  form.append('file', new Blob([lines.join('\n') + '\n']), 'input.jsonl')
  const file = await server.req('POST', '/v1/files', { token: user.token, raw: form })
  expect(file.status).toBe(200)
  const batch = await server.req('POST', '/v1/batches', {
    token: user.token,
    body: { input_file_id: file.body.id, endpoint: '/v1/chat/completions' },
  })
  expect(batch.status).toBe(200)
  await until('validation', async () => (await getBatch(batch.body.id)).status === 'validated')
  return batch.body.id
}

const statusIs = (id: string, status: string) => async () => {
  const b = await getBatch(id)
  return b.status === status ? b : null
}

async function fileLines(fileId: string | null): Promise<any[]> {
  if (!fileId) return []
  const res = await server.req('GET', `/v1/files/${fileId}/content`, { token: user.token })
  expect(res.status).toBe(200)
  return res.text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
}

/** Every custom_id of the input appears exactly once across the output and error files. */
async function expectEveryIdOnce(batch: any, n: number) {
  const out = await fileLines(batch.output_file_id)
  const err = await fileLines(batch.error_file_id)
  const ids = [...out, ...err].map((l) => l.custom_id)
  expect(ids).toHaveLength(n)
  expect(new Set(ids).size).toBe(n)
  expect(batch.request_counts).toEqual({ total: n, completed: out.length, failed: err.length })
  return { out, err }
}

function runtime(o: Parameters<typeof startFakeRuntime>[0] = {}): FakeRuntime {
  return startFakeRuntime({ models: [RUNTIME_MODEL], ...o })
}

describe('daemon against the real control plane', () => {
  test('a 1,000-line batch reaches completed with every custom_id exactly once', async () => {
    const rt = runtime()
    const batchId = await submit(chatLines(1000, SLUG))
    const daemon = runAgent(daemonOptions(server.url, key, rt.url, { concurrency: 16 }), fastDeps())
    try {
      const batch = await until('completion', statusIs(batchId, 'completed'))
      const { out, err } = await expectEveryIdOnce(batch, 1000)
      expect(err).toEqual([])
      expect(out[0].response.status_code).toBe(200)
      // The runtime only ever saw the serving profile's runtime_model_id, never the catalogue slug.
      expect([...rt.models]).toEqual([RUNTIME_MODEL])
      expect(batch.attempts).toBe(0)
      // The worker listing shows what the daemon reported.
      const workers = await server.req('GET', `/v1/orgs/${user.personalOrgId}/workers`, { token: user.token })
      const row = workers.body.data.find((w: any) => w.id === daemon.agent.id)
      expect(row).toMatchObject({
        status: 'online',
        runtimes: [{ engine: 'openai', base_url: rt.url, status: 'online' }],
      })
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
      await rt.stop()
    }
  })

  test('runtime failures are retried, and what still fails is recorded per line in the error file', async () => {
    const rt = runtime()
    const content = (i: number) =>
      (['#500x1', '#429x2', '#500', '#drop', '#400'][i % 10] ?? `fine ${i}`) + ` ${i}`
    const batchId = await submit(chatLines(50, SLUG, content))
    const daemon = runAgent(daemonOptions(server.url, key, rt.url), fastDeps())
    try {
      const batch = await until('completion', statusIs(batchId, 'completed'))
      const { out, err } = await expectEveryIdOnce(batch, 50)
      // Per ten lines: #500x1, #429x2 and five fine lines succeed; #500, #drop and #400 fail.
      expect(out).toHaveLength(35)
      expect(err).toHaveLength(15)
      const failedFor = (k: number) => err.filter((l) => Number(l.custom_id.split('-')[1]) % 10 === k)
      for (const l of failedFor(2)) expect(l.response.status_code).toBe(500)
      for (const l of failedFor(3))
        expect(l).toMatchObject({ response: null, error: { code: 'connection_error' } })
      for (const l of failedFor(4)) expect(l.response.status_code).toBe(400)
    } finally {
      daemon.agent.shutdown(true)
      await daemon.done
      await rt.stop()
    }
  })

  test('the server low on disk: results wait with the batch held, then the batch completes (docs/api.md §15)', async () => {
    const rt = runtime()
    const batchId = await submit(chatLines(20, SLUG))
    // The server's disk is below MIN_FREE_DISK_BYTES until `low` is cleared.
    let low = true
    let refused = 0
    const { disk, config } = server.deps
    server.deps.config = { ...config, MIN_FREE_DISK_BYTES: 1_000_000 }
    server.deps.disk = {
      freeBytes: async () => {
        if (low) refused++
        return low ? 999_999 : 1_000_000
      },
    }
    // The server's Retry-After (30 s) is capped to 20 ms here, so the retries come quickly.
    const daemon = runAgent(
      daemonOptions(server.url, key, rt.url),
      fastDeps({ backoff: { baseMs: 5, maxMs: 50, maxRetryAfterMs: 20 } }),
    )
    try {
      await until('three refused result uploads', async () => refused >= 3)
      const held = await getBatch(batchId)
      expect(held).toMatchObject({ status: 'in_progress', attempts: 0 })
      // Still heartbeating, and still reporting the batch as its job.
      const list = await server.req('GET', `/v1/orgs/${user.personalOrgId}/workers`, { token: user.token })
      const worker = list.body.data.find((w: any) => w.id === daemon.agent.id)
      expect(worker).toMatchObject({ status: 'online', current_job_id: batchId })

      low = false
      const done = await until('completion', statusIs(batchId, 'completed'))
      expect(done.attempts).toBe(0)
      await expectEveryIdOnce(done, 20)
    } finally {
      server.deps.disk = disk
      server.deps.config = config
      daemon.agent.shutdown(true)
      await daemon.done
      await rt.stop()
    }
  })

  test('the runtime killed mid-job: the daemon reports the failure and the batch is requeued', async () => {
    const rt = runtime({ latencyMs: 5 })
    const batchId = await submit(chatLines(400, SLUG))
    const daemon = runAgent(daemonOptions(server.url, key, rt.url, { concurrency: 2 }), fastDeps())
    try {
      await until('requests flowing', async () => rt.requests > 20)
      await rt.stop()
      const requeued = await until('the requeue', async () => {
        const b = await getBatch(batchId)
        return b.status === 'validated' && b.attempts === 1 ? b : null
      })
      expect(requeued.error).toContain('runtime unreachable')
      // Once the runtime is back, the same daemon claims it again and finishes it.
      rt.restart()
      const done = await until('completion', statusIs(batchId, 'completed'))
      expect(done.attempts).toBe(1)
      await expectEveryIdOnce(done, 400)
    } finally {
      daemon.agent.shutdown(true)
      await daemon.done
      await rt.stop()
    }
  })

  test('the daemon killed mid-job: the sweeper requeues the batch and a second daemon finishes it', async () => {
    const rt = runtime({ latencyMs: 5 })
    const batchId = await submit(chatLines(300, SLUG))
    // A real process, killed with SIGKILL: nothing is reported, heartbeats just stop.
    const proc = ownProcess(
      Bun.spawn(
        [
          'bun',
          CLI,
          '--server',
          server.url,
          '--runtime',
          'openai',
          '--runtime-url',
          rt.url,
          '--concurrency',
          '2',
          '--vram-gb',
          '24',
          '--poll-interval',
          '0.05',
          '--state-dir',
          join(dir, 'crashing'),
        ],
        { env: { ...process.env, GRIDKEEP_WORKER_KEY: key }, stdout: 'pipe', stderr: 'pipe' },
      ),
    )
    const second = { current: null as ReturnType<typeof runAgent> | null }
    try {
      await until(
        'the first daemon at work',
        async () => (await getBatch(batchId)).status === 'in_progress' && rt.requests > 20,
      )
      proc.kill('SIGKILL')
      await proc.exited
      for (const l of (await new Response(proc.stdout).text()).split('\n').filter(Boolean)) captureLogLine(l)
      const held = await getBatch(batchId)
      expect(held.status).toBe('in_progress')

      // 121 s of silence on the server's clock, then one sweeper pass.
      server.clock.advance(server.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
      const pass = await sweep(server.deps)
      expect(pass.requeued).toContain(batchId)
      const requeued = await getBatch(batchId)
      expect(requeued).toMatchObject({ status: 'validated', attempts: 1 })
      expect(requeued.error).toMatch(/went silent/)

      second.current = runAgent(daemonOptions(server.url, key, rt.url, { concurrency: 8 }), fastDeps())
      const done = await until('completion by the second daemon', statusIs(batchId, 'completed'))
      expect(done.attempts).toBe(1)
      await expectEveryIdOnce(done, 300)
    } finally {
      proc.kill('SIGKILL')
      second.current?.agent.shutdown(true)
      await second.current?.done
      await rt.stop()
    }
  })

  test('SIGTERM past the grace period: the daemon reports its job, exits 0, and the batch is requeued', async () => {
    const rt = runtime({ latencyMs: 20 })
    const batchId = await submit(chatLines(200, SLUG))
    const proc = ownProcess(
      Bun.spawn(
        [
          'bun',
          CLI,
          '--server',
          server.url,
          '--runtime',
          'openai',
          '--runtime-url',
          rt.url,
          '--concurrency',
          '1',
          '--vram-gb',
          '24',
          '--poll-interval',
          '0.05',
          '--shutdown-grace',
          '0.2',
          '--state-dir',
          join(dir, 'stopping'),
        ],
        { env: { ...process.env, GRIDKEEP_WORKER_KEY: key }, stdout: 'pipe', stderr: 'pipe' },
      ),
    )
    try {
      await until('the job running', async () => rt.requests > 3)
      proc.kill('SIGTERM')
      expect(await proc.exited).toBe(0)
      for (const l of (await new Response(proc.stdout).text()).split('\n').filter(Boolean)) captureLogLine(l)
      const b = await getBatch(batchId)
      expect(b).toMatchObject({
        status: 'validated',
        attempts: 1,
        error: 'worker shut down before finishing the job',
      })
    } finally {
      proc.kill('SIGKILL')
      await rt.stop()
    }
  })

  test('an Ollama entry with num_ctx is seeded, and its options reach Ollama (a model made with them) for the batch', async () => {
    const listed = await server.req('GET', '/v1/models', { token: user.token })
    expect(listed.body.data.map((m: any) => m.id)).toContain(CTX_SLUG)
    const weights = 'c7'.repeat(32)
    const rt = startFakeRuntime({
      ollama: {
        models: [
          {
            tag: { name: CTX_TAG, model: CTX_TAG, size: 1000, digest: 'e'.repeat(64) },
            show: { modelfile: `FROM /root/.ollama/models/blobs/sha256-${weights}\n` },
          },
        ],
      },
    })
    const batchId = await submit(chatLines(4, CTX_SLUG))
    const daemon = runAgent(
      daemonOptions(server.url, key, rt.url, { runtime: 'ollama', engine: 'ollama' }),
      fastDeps(),
    )
    try {
      const done = await until('completion', statusIs(batchId, 'completed'))
      expect(done.request_counts).toEqual({ total: 4, completed: 4, failed: 0 })
      const create = rt.ollamaCalls.find((c) => c.path === '/api/create')!
      expect(create.body).toEqual({
        model: expect.stringMatching(/^gridkeep\/e2e-ctx:[0-9a-f]{12}$/),
        from: CTX_TAG,
        parameters: { num_ctx: 8192, temperature: 0.3 },
        stream: false,
      })
      // Every request named the model made with the options; after the last, keep_alive.
      expect([...rt.models]).toEqual([create.body.model])
      await until('keep_alive sent', () => rt.ollamaCalls.some((c) => c.path === '/api/generate'))
      expect(rt.ollamaCalls.filter((c) => c.path === '/api/generate')).toEqual([
        { path: '/api/generate', body: { model: create.body.model, keep_alive: '1h', stream: false } },
      ])
      // The made model is not one of the worker's models.
      const workers = await server.req('GET', `/v1/orgs/${user.personalOrgId}/workers`, { token: user.token })
      const row = workers.body.data.find((w: any) => w.id === daemon.agent.id)
      expect(row.models.map((m: any) => m.name)).toEqual([CTX_TAG])
    } finally {
      daemon.agent.shutdown(true)
      await daemon.done
      await rt.stop()
    }
  })

  test('pull_models: the daemon pulls a catalogued model it lacks, reports model-progress, then runs the batch', async () => {
    const rt = startFakeRuntime({
      ollama: {
        models: [],
        library: {
          [PULLED_TAG]: {
            tag: { name: PULLED_TAG, model: PULLED_TAG, size: 397821319, digest: 'c'.repeat(64) },
            show: {
              modelfile: `FROM /root/.ollama/models/blobs/sha256-${PULLED_WEIGHTS}\nTEMPLATE {{ .Prompt }}\n`,
            },
            layers: [
              { digest: `sha256:${PULLED_WEIGHTS}`, size: 397807936 },
              { digest: `sha256:${'d'.repeat(64)}`, size: 1482 },
            ],
          },
        },
      },
    })
    const batchId = await submit(chatLines(20, PULLED_SLUG))
    const before = capturedLogLines().length
    const daemon = runAgent(
      daemonOptions(server.url, key, rt.url, { runtime: 'ollama', engine: 'ollama', max_download_gb: 1 }),
      fastDeps(),
    )
    try {
      const done = await until('completion after the pull', statusIs(batchId, 'completed'))
      expect(done.request_counts).toEqual({ total: 20, completed: 20, failed: 0 })
      expect(rt.pulls).toEqual([PULLED_TAG])
      expect([...rt.models]).toEqual([PULLED_TAG])
      // The server accepted and logged the download progress.
      const logged = capturedLogLines()
        .slice(before)
        .filter((l) => l.includes('model download progress'))
        .map((l) => JSON.parse(l).status)
      expect(logged).toContain('downloading')
      expect(logged).toContain('completed')
      // The worker now hosts the entry's pinned weights.
      const workers = await server.req('GET', `/v1/orgs/${user.personalOrgId}/workers`, { token: user.token })
      const row = workers.body.data.find((w: any) => w.id === daemon.agent.id)
      expect(row.models.find((m: any) => m.name === PULLED_TAG)?.digest).toBe(PULLED_WEIGHTS)
    } finally {
      daemon.agent.shutdown(true)
      await daemon.done
      await rt.stop()
    }
  })
})
