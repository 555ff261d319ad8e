import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { type LlamaServer, startLlamaServer } from '../../scripts/llama-server'
import { batches } from '../../src/db/schema'
import { startTestServer, type TestServer } from '../helpers/app'
import { type MadeUser, makeUser, makeWorkerKey } from '../helpers/builders'
import { daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { tinyModelPath, withRealEngine } from '../helpers/llama'

// The reference daemon against a REAL engine: llama.cpp's llama-server (scripts/llama-server.ts)
// serving the tiny generated model, the real control plane of the test helpers, batches uploaded
// and validated through /v1/files and /v1/batches, results read back through the output files.

const SLUG = 'gridkeep-tiny-f32'
const ALIAS = 'gridkeep-tiny'

withRealEngine('daemon against llama-server', (engine) => {
  let server: TestServer
  let user: MadeUser
  let key: string
  let llama: LlamaServer
  const dir = mkdtempSync(join(tmpdir(), 'gk-llama-'))

  beforeAll(async () => {
    const manifest = join(dir, 'models.yaml')
    writeFileSync(
      manifest,
      [
        'models:',
        `  - id: ${SLUG}`,
        '    display_name: Tiny llama (F32)',
        '    task_type: chat',
        '    quantization: F32',
        '    vram_gb: 1',
        '    capabilities: {embeddings: true}',
        '    serving_profiles:',
        '      - runtime: llama.cpp',
        `        runtime_model_id: ${ALIAS}`,
      ].join('\n'),
    )
    server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'warn' })
    user = await makeUser(server)
    key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    llama = await startLlamaServer({ engine, modelPath: await tinyModelPath(), alias: ALIAS, slots: 4 })
  })

  afterAll(async () => {
    await llama?.stop()
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  async function until<T>(what: string, probe: () => Promise<T | undefined | null | false>, ms = 30_000) {
    const deadline = Date.now() + ms
    for (;;) {
      const v = await probe()
      if (v) return v
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
      await Bun.sleep(10)
    }
  }

  const getBatch = async (id: string) =>
    (await server.req('GET', `/v1/batches/${id}`, { token: user.token })).body

  async function submit(endpoint: string, lines: object[]): Promise<string> {
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

  /** Output and error lines; every custom_id exactly once, and the batch usage is their sum. */
  async function results(batch: any, n: number) {
    const out = await fileLines(batch.output_file_id)
    const err = await fileLines(batch.error_file_id)
    const ids = [...out, ...err].map((l) => l.custom_id)
    expect(new Set(ids).size).toBe(n)
    expect(ids).toHaveLength(n)
    expect(batch.request_counts).toEqual({ total: n, completed: out.length, failed: err.length })
    const row = server.deps.db.select().from(batches).where(eq(batches.id, batch.id)).get()!
    const sum: Record<string, number> = {}
    for (const l of out)
      for (const [k, v] of Object.entries(l.response.body.usage ?? {}))
        if (typeof v === 'number') sum[k] = (sum[k] ?? 0) + v
    expect(row.usage).toEqual(sum)
    return { out, err, usage: sum }
  }

  const chat = (i: number, extra: object = {}) => ({
    custom_id: `chat-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: {
      model: SLUG,
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

  test('a chat batch completes with the engine’s real answers and token usage', async () => {
    const batchId = await submit(
      '/v1/chat/completions',
      Array.from({ length: 20 }, (_, i) => chat(i)),
    )
    const daemon = worker()
    try {
      const batch = await until('completion', completed(batchId))
      const { out, err, usage } = await results(batch, 20)
      expect(err).toEqual([])
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
    } finally {
      daemon.agent.shutdown(true)
      expect(await daemon.done).toBe(0)
    }
  })
})
