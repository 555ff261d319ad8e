import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { type LlamaServer, startLlamaServer } from '../../scripts/llama-server'
import { startTestServer, type TestServer } from '../helpers/app'
import { type MadeUser, makeUser, makeWorkerKey } from '../helpers/builders'
import { ownChild } from '../helpers/children'
import { daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { tinyModelPath, withRealEngine } from '../helpers/llama'
import { rowsOf } from '../helpers/rows'
import { until } from '../helpers/until'

// The reference daemon against a REAL engine: llama.cpp's llama-server (scripts/llama-server.ts)
// serving the tiny generated model, the real control plane of the test helpers, batches uploaded
// and validated through /v1/files and /v1/batches, results read back through the output files.

const SLUG = 'gridkeep-tiny-f32'
const EMBED_SLUG = 'gridkeep-tiny-embed-f32'
// Same runtime string, pinned to other weights: never this worker's model (docs/api.md §7 Poll rule 4).
const OTHER_WEIGHTS_SLUG = 'gridkeep-tiny-other-f32'
const ALIAS = 'gridkeep-tiny'

withRealEngine('daemon against llama-server', (engine) => {
  let server: TestServer
  let user: MadeUser
  let key: string
  let llama: LlamaServer
  let tinyDigest: string
  const dir = mkdtempSync(join(tmpdir(), 'gk-llama-'))

  beforeAll(async () => {
    const modelPath = await tinyModelPath()
    const digest = new Bun.CryptoHasher('sha256').update(await Bun.file(modelPath).bytes()).digest('hex')
    tinyDigest = digest
    const entry = (id: string, task: string, sha: string) => [
      `  - id: ${id}`,
      `    display_name: Tiny llama ${id}`,
      `    task_type: ${task}`,
      '    quantization: F32',
      '    vram_gb: 1',
      `    digest: sha256:${sha}`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${ALIAS}`,
    ]
    const manifest = join(dir, 'models.yaml')
    writeFileSync(
      manifest,
      [
        'models:',
        ...entry(SLUG, 'chat', digest),
        ...entry(EMBED_SLUG, 'embedding', digest),
        ...entry(OTHER_WEIGHTS_SLUG, 'chat', 'ab'.repeat(32)),
      ].join('\n'),
    )
    server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'warn' })
    user = await makeUser(server)
    key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    llama = ownChild(await startLlamaServer({ engine, modelPath, alias: ALIAS, slots: 4 }))
  })

  afterAll(async () => {
    await llama?.stop()
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  const getBatch = async (id: string) =>
    (await server.req('GET', `/v1/batches/${id}`, { token: user.token })).body

  /** Uploads and creates the batch; waits until it is validated unless a worker may claim it at once. */
  async function submit(endpoint: string, lines: object[], waitValidated = true): Promise<string> {
    const form = new FormData()
    form.append('purpose', 'batch')
    form.append('file', new Blob([lines.map((l) => JSON.stringify(l)).join('\n') + '\n']), 'input.jsonl')
    const file = await server.req('POST', '/v1/files', { token: user.token, raw: form })
    expect(file.status).toBe(200)
    const batch = await server.req('POST', '/v1/batches', {
      token: user.token,
      body: { input_file_id: file.body.id, endpoint },
    })
    expect(batch.status).toBe(200)
    if (waitValidated)
      await until('validation', async () => (await getBatch(batch.body.id)).status === 'validated')
    return batch.body.id
  }

  const completed = (id: string) => async () => {
    const b = await getBatch(id)
    if (b.status === 'failed') throw new Error(`batch failed: ${b.error}`)
    return b.status === 'completed' ? b : null
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

  /**
   * Output and error lines; every custom_id exactly once, and the batch usage is their sum (with
   * `responses`, the Responses usage also as prompt and completion tokens; the engine's cached
   * prompt tokens as cached_tokens: docs/api.md §7), which the batch object carries (§6).
   */
  async function results(batch: any, n: number, responses = false) {
    const out = await fileLines(batch.output_file_id)
    const err = await fileLines(batch.error_file_id)
    const ids = [...out, ...err].map((l) => l.custom_id)
    expect(new Set(ids).size).toBe(n)
    expect(ids).toHaveLength(n)
    expect(batch.request_counts).toEqual({ total: n, completed: out.length, failed: err.length })
    const row = (await server.deps.store.batches.get(batch.id, null))!
    const sum: Record<string, number> = {}
    for (const l of out) {
      const usage = l.response.body.usage ?? {}
      for (const [k, v] of Object.entries(usage)) if (typeof v === 'number') sum[k] = (sum[k] ?? 0) + v
      const cached = (usage.prompt_tokens_details ?? usage.input_tokens_details)?.cached_tokens
      if (typeof cached === 'number') sum.cached_tokens = (sum.cached_tokens ?? 0) + cached
    }
    if (responses)
      Object.assign(sum, { prompt_tokens: sum.input_tokens, completion_tokens: sum.output_tokens })
    expect(row.usage).toEqual(sum)
    expect(batch.usage).toMatchObject({
      input_tokens: sum.prompt_tokens,
      input_tokens_details: { cached_tokens: sum.cached_tokens ?? 0 },
    })
    return { out, err, usage: sum }
  }

  const chat = (i: number, extra: object = {}, model = SLUG) => ({
    custom_id: `chat-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: {
      model,
      messages: [{ role: 'user', content: `Tell me about ${i}` }],
      max_tokens: 6,
      temperature: 0,
      ...extra,
    },
  })

  const worker = (o: Parameters<typeof daemonOptions>[3] = {}) =>
    runAgent(
      daemonOptions(server.url, key, llama.url, { engine: 'llama.cpp', concurrency: 4, ...o }),
      fastDeps(),
    )

  test('a chat batch for the entry pinned to the model’s digest completes with real answers and usage; no --model-file', async () => {
    const other = await submit('/v1/chat/completions', [chat(0, {}, OTHER_WEIGHTS_SLUG)])
    const batchId = await submit(
      '/v1/chat/completions',
      Array.from({ length: 20 }, (_, i) => chat(i)),
    )
    const daemon = worker()
    try {
      const batch = await until('completion', completed(batchId))
      const { out, err, usage } = await results(batch, 20)
      expect(err).toEqual([])
      // 20 requests on 4 slots: a slot's later requests find the chat template's start in its cache.
      expect(usage.cached_tokens).toBeGreaterThan(0)
      for (const l of out) {
        expect(l.response.status_code).toBe(200)
        expect(l.response.body.object).toBe('chat.completion')
        expect(l.response.body.model).toBe(ALIAS)
        expect(typeof l.response.body.choices[0].message.content).toBe('string')
        expect(l.response.body.usage.completion_tokens).toBeGreaterThan(0)
        expect(l.response.body.usage.completion_tokens).toBeLessThanOrEqual(6)
        expect(l.response.body.usage.prompt_tokens).toBeGreaterThan(0)
      }
      expect(usage.total_tokens).toBe(usage.prompt_tokens! + usage.completion_tokens!)
      // The worker reported the file llama-server loaded, hashed, as the model's digest.
      const workers = await server.req('GET', `/v1/orgs/${user.personalOrgId}/workers`, { token: user.token })
      const row = workers.body.data.find((w: any) => w.id === daemon.agent.id)
      expect(row.models.find((m: any) => m.name === ALIAS)).toMatchObject({ digest: tinyDigest })
      // The entry with the same runtime string but other weights was never claimed.
      expect((await getBatch(other)).status).toBe('validated')
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
    // Nobody else can serve it: leave the queue clean for the next tests.
    const { db, tables } = rowsOf(server.deps)
    await db.delete(tables.batches).where(eq(tables.batches.id, other))
  })

  test('completions and embeddings batches complete with real content and usage', async () => {
    const completions = await submit(
      '/v1/completions',
      Array.from({ length: 10 }, (_, i) => ({
        custom_id: `cmp-${i}`,
        body: { model: SLUG, prompt: `Once upon a time ${i}`, max_tokens: 5, temperature: 0 },
      })),
    )
    const embeddings = await submit(
      '/v1/embeddings',
      Array.from({ length: 10 }, (_, i) => ({
        custom_id: `emb-${i}`,
        body: { model: EMBED_SLUG, input: [`first text ${i}`, `second text ${i}`] },
      })),
    )
    const daemon = worker()
    try {
      const c = await results(await until('completions', completed(completions)), 10)
      expect(c.err).toEqual([])
      for (const l of c.out) {
        expect(l.response.body.object).toBe('text_completion')
        expect(typeof l.response.body.choices[0].text).toBe('string')
      }
      expect(c.usage.completion_tokens).toBeGreaterThan(0)
      const e = await results(await until('embeddings', completed(embeddings)), 10)
      expect(e.err).toEqual([])
      for (const l of e.out) {
        const data = l.response.body.data
        expect(data).toHaveLength(2)
        expect(data[0].embedding).toHaveLength(64)
        expect(data[0].embedding.some((x: number) => x !== 0)).toBe(true)
      }
      expect(e.usage.prompt_tokens).toBeGreaterThan(0)
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  })

  test('a /v1/responses batch completes with the engine’s Responses objects; its usage sums input and output tokens', async () => {
    const n = 10
    const batchId = await submit(
      '/v1/responses',
      Array.from({ length: n }, (_, i) => ({
        custom_id: `resp-${i}`,
        method: 'POST',
        url: '/v1/responses',
        body: {
          model: SLUG,
          // A string input, or input items with instructions.
          ...(i % 2
            ? { input: `Tell me about ${i}` }
            : { instructions: 'Be brief', input: [{ role: 'user', content: `Tell me about ${i}` }] }),
          max_output_tokens: 6,
          temperature: 0,
          stream: false,
        },
      })),
    )
    const daemon = worker()
    try {
      const batch = await until('completion', completed(batchId))
      expect(batch.endpoint).toBe('/v1/responses')
      const { out, err, usage } = await results(batch, n, true)
      expect(err).toEqual([])
      for (const l of out) {
        expect(l.response.status_code).toBe(200)
        const body = l.response.body
        expect(body).toMatchObject({ object: 'response', status: 'completed', model: ALIAS })
        const message = body.output.find((o: any) => o.type === 'message')
        expect(message.content[0].type).toBe('output_text')
        expect(typeof message.content[0].text).toBe('string')
        expect(body.usage.input_tokens).toBeGreaterThan(0)
        expect(body.usage.output_tokens).toBeGreaterThan(0)
        expect(body.usage.output_tokens).toBeLessThanOrEqual(6)
      }
      // results() compared the batch's usage with the lines' sums, prompt and completion tokens included.
      expect(usage.input_tokens).toBeGreaterThan(0)
      expect(usage.total_tokens).toBe(usage.input_tokens! + usage.output_tokens!)
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  })

  test('a line the engine rejects goes to the error file; the rest succeed', async () => {
    const lines = Array.from({ length: 12 }, (_, i) => chat(i))
    lines[5] = { ...chat(5), body: { model: SLUG, messages: 'not a list of messages' } as any }
    const batchId = await submit('/v1/chat/completions', lines)
    const daemon = worker()
    try {
      const { out, err } = await results(await until('completion', completed(batchId)), 12)
      expect(out).toHaveLength(11)
      expect(err).toHaveLength(1)
      expect(err[0]).toMatchObject({ custom_id: 'chat-5', response: { status_code: 400 }, error: null })
      expect(err[0].response.body.error.message).toContain('messages')
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  })

  test('more requests in flight than the engine has slots queue in the engine without errors', async () => {
    const batchId = await submit(
      '/v1/chat/completions',
      Array.from({ length: 64 }, (_, i) => chat(i)),
    )
    // 4 slots, 32 requests in flight.
    const daemon = worker({ concurrency: 32 })
    try {
      const { out, err } = await results(await until('completion', completed(batchId)), 64)
      expect(err).toEqual([])
      expect(out.every((l) => l.response.status_code === 200)).toBe(true)
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  })

  test('the engine killed mid-batch and restarted: the batch is requeued, then completes with nothing lost', async () => {
    const n = 300
    const batchId = await submit(
      '/v1/chat/completions',
      Array.from({ length: n }, (_, i) => chat(i, { max_tokens: 24 })),
    )
    const daemon = worker({ concurrency: 2 })
    try {
      await until('requests flowing', async () => (await getBatch(batchId)).request_counts.completed > 10)
      await llama.stop(true)
      const requeued = await until('the requeue', async () => {
        const b = await getBatch(batchId)
        return b.status === 'validated' && b.attempts === 1 ? b : null
      })
      expect(requeued.error).toContain('runtime unreachable')
      llama = ownChild(
        await startLlamaServer({
          engine,
          modelPath: llama.modelPath,
          alias: ALIAS,
          slots: 4,
          port: llama.port,
        }),
      )
      const batch = await until('completion', completed(batchId), 60_000)
      expect(batch.attempts).toBe(1)
      const { out, err } = await results(batch, n)
      expect(err).toEqual([])
      expect(out.every((l) => l.response.status_code === 200)).toBe(true)
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  }, 90_000)

  test('a batch split into shards runs on two daemons and completes with real content (docs/api.md §16)', async () => {
    // A server of its own whose shards are small enough for a small batch to be split.
    const sharded = await startTestServer({
      CATALOGUE_PATH: join(dir, 'models.yaml'),
      LOG_LEVEL: 'warn',
      SHARD_MIN_REQUESTS: '4',
      SHARD_MAX_REQUESTS: '12',
    })
    const owner = await makeUser(sharded)
    const workerKey = (await makeWorkerKey(sharded, owner, owner.personalOrgId)).key
    const form = new FormData()
    form.append('purpose', 'batch')
    form.append(
      'file',
      new Blob([`${Array.from({ length: 30 }, (_, i) => JSON.stringify(chat(i))).join('\n')}\n`]),
      'input.jsonl',
    )
    const file = await sharded.req('POST', '/v1/files', { token: owner.token, raw: form })
    const created = await sharded.req('POST', '/v1/batches', {
      token: owner.token,
      body: { input_file_id: file.body.id, endpoint: '/v1/chat/completions' },
    })
    const daemons = ['llama-a', 'llama-b'].map((name) =>
      runAgent(
        daemonOptions(sharded.url, workerKey, llama.url, { engine: 'llama.cpp', concurrency: 2, name }),
        fastDeps(),
      ),
    )
    try {
      const get = async (path: string) => (await sharded.req('GET', path, { token: owner.token })).body
      const batch = await until('completion', async () => {
        const b = await get(`/v1/batches/${created.body.id}`)
        if (b.status === 'failed') throw new Error(`batch failed: ${b.error}`)
        return b.status === 'completed' ? b : null
      })
      expect(batch.request_counts).toEqual({ total: 30, completed: 30, failed: 0 })
      const shards = (await get(`/v1/batches/${created.body.id}/shards?limit=100`)).data
      expect(shards.length).toBeGreaterThan(2)
      expect(new Set(shards.map((s: any) => s.worker_name))).toEqual(new Set(['llama-a', 'llama-b']))
      const out = (
        await sharded.req('GET', `/v1/files/${batch.output_file_id}/content`, { token: owner.token })
      ).text
        .split('\n')
        .filter(Boolean)
        .map((l: string) => JSON.parse(l))
      // Every request once; within a shard, lines come in the order the daemon finished them.
      expect(out.map((l: any) => l.custom_id).sort()).toEqual(
        Array.from({ length: 30 }, (_, i) => `chat-${i}`).sort(),
      )
      for (const l of out) {
        expect(l.response.body.model).toBe(ALIAS)
        expect(typeof l.response.body.choices[0].message.content).toBe('string')
        expect(l.response.body.usage.completion_tokens).toBeGreaterThan(0)
      }
    } finally {
      for (const d of daemons) d.agent.shutdown(true)
      await Promise.all(daemons.map((d) => d.done))
      await sharded.stop()
    }
  })

  test('an idle daemon is handed a new batch by its held poll, not by its next poll interval', async () => {
    // A poll interval longer than the test: only a held poll (wait_seconds) can pick the batch up.
    const daemon = worker({ poll_interval: 3600, poll_wait: 30 })
    try {
      await until('a held poll', async () => server.deps.pollWaiters.size === 1)
      const batchId = await submit(
        '/v1/chat/completions',
        Array.from({ length: 4 }, (_, i) => chat(i)),
        false,
      )
      const { err } = await results(await until('completion', completed(batchId)), 4)
      expect(err).toEqual([])
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  })
})
