import { afterAll, expect, test } from 'bun:test'
import { createReadStream, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import OpenAI, { toFile, toStreamingFile } from 'openai'
import { startTestServer } from '../helpers/app'
import { jsonl, line, makeCatalogEntry } from '../helpers/batches'
import { makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { until } from '../helpers/until'

// The official `openai` SDK against a real server (docs/api.md: "that compatibility is a product
// feature"): a personal key as apiKey, baseURL <server>/v1.

const s = await startTestServer()
afterAll(() => s.stop())

const model = (await makeCatalogEntry(s, { id: 'sdk-8b-q4km' })).id
const CONTENT = jsonl([line('a', model), line('b', model), line('c', model)])

/** What the SDK handed to fetch, to show which uploads went out chunked. */
const sent: { url: string; headers: Headers; body: unknown }[] = []

const client = async () => {
  const u = await makeUser(s)
  const { key } = await makePersonalKey(s, u)
  return new OpenAI({
    apiKey: key,
    baseURL: `${s.url}/v1`,
    maxRetries: 0,
    fetch: (url: any, init: any) => {
      sent.push({ url: String(url), headers: new Headers(init?.headers), body: init?.body })
      return fetch(url, init)
    },
  })
}

test('files.create from a file on disk, files.retrieve, files.content', async () => {
  const openai = await client()
  const path = join(s.config.DATA_DIR, 'requests.jsonl')
  writeFileSync(path, CONTENT)
  const file = await openai.files.create({ file: createReadStream(path), purpose: 'batch' })
  expect(file).toMatchObject({
    object: 'file',
    bytes: CONTENT.length,
    filename: 'requests.jsonl',
    purpose: 'batch',
  })
  expect((await openai.files.retrieve(file.id)).id).toBe(file.id)
  const res = await openai.files.content(file.id)
  expect(res.headers.get('content-type')).toBe('application/jsonl')
  expect(await res.text()).toBe(CONTENT)
})

test('files.create from a stream (chunked, no Content-Length) and from toFile', async () => {
  const openai = await client()
  async function* generate() {
    for (const l of CONTENT.split(/(?<=\n)/)) yield new TextEncoder().encode(l)
  }
  const streamed = await openai.files.create({
    file: toStreamingFile(generate(), 'gen.jsonl'),
    purpose: 'batch',
  })
  const request = sent.at(-1)!
  expect(request.body).toBeInstanceOf(ReadableStream)
  expect(request.headers.get('content-length')).toBeNull()
  expect(streamed).toMatchObject({ filename: 'gen.jsonl', bytes: CONTENT.length })
  expect(await (await openai.files.content(streamed.id)).text()).toBe(CONTENT)
  const buffered = await openai.files.create({
    file: await toFile(Buffer.from(CONTENT), 'buf.jsonl'),
    purpose: 'batch',
  })
  expect(buffered.bytes).toBe(CONTENT.length)
  const listed = await openai.files.list({ purpose: 'batch' })
  expect(listed.data.map((f) => f.id)).toEqual([buffered.id, streamed.id])
  expect(await openai.files.delete(buffered.id)).toEqual({ id: buffered.id, object: 'file', deleted: true })
})

test('expires_after as the SDK sends it (docs/api.md §15), buffered and streamed; out of range is a 400', async () => {
  const openai = await client()
  const expiring = await openai.files.create({
    file: await toFile(Buffer.from(CONTENT), 'exp.jsonl'),
    purpose: 'batch',
    expires_after: { anchor: 'created_at', seconds: 7200 },
  })
  expect(expiring.expires_at).toBe(expiring.created_at + 7200)
  expect((await openai.files.retrieve(expiring.id)).expires_at).toBe(expiring.created_at + 7200)
  async function* generate() {
    yield new TextEncoder().encode(CONTENT)
  }
  const streamed = await openai.files.create({
    file: toStreamingFile(generate(), 'exp-gen.jsonl'),
    purpose: 'batch',
    expires_after: { anchor: 'created_at', seconds: 2_592_000 },
  })
  expect(sent.at(-1)!.headers.get('content-length')).toBeNull()
  expect(streamed.expires_at).toBe(streamed.created_at + 2_592_000)
  const plain = await openai.files.create({
    file: await toFile(Buffer.from(CONTENT), 'p.jsonl'),
    purpose: 'batch',
  })
  expect(plain.expires_at).toBeNull()

  const err = await openai.files
    .create({
      file: await toFile(Buffer.from(CONTENT), 'short.jsonl'),
      purpose: 'batch',
      expires_after: { anchor: 'created_at', seconds: 60 },
    })
    .catch((e) => e)
  expect(err).toBeInstanceOf(OpenAI.BadRequestError)
  expect(err.code).toBe('invalid_value')
  expect(err.param).toBe('expires_after[seconds]')
})

test('a rejected upload surfaces as the SDK error with the envelope', async () => {
  const openai = await client()
  const err = await openai.files
    .create({ file: await toFile(Buffer.from('x'), 'notes.txt'), purpose: 'batch' })
    .catch((e) => e)
  expect(err).toBeInstanceOf(OpenAI.BadRequestError)
  expect(err.code).toBe('invalid_file_type')
})

test('batches.create, batches.retrieve, batches.list with pagination and auto-pagination', async () => {
  const openai = await client()
  const file = await openai.files.create({
    file: await toFile(Buffer.from(CONTENT), 'in.jsonl'),
    purpose: 'batch',
  })
  const created: string[] = []
  for (let i = 0; i < 5; i++) {
    const batch = await openai.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      metadata: { n: String(i) },
    })
    expect(batch).toMatchObject({ object: 'batch', status: 'validating', input_file_id: file.id })
    created.push(batch.id)
  }
  // The validator takes batches created in one second in no promised order: wait for all five.
  await until('validation', async () => {
    for (const id of created)
      if (((await openai.batches.retrieve(id)).status as string) !== 'validated') return false
    return true
  })
  const done = await openai.batches.retrieve(created[0]!)
  expect(done).toMatchObject({
    status: 'validated',
    model,
    request_counts: { total: 3, completed: 0, failed: 0 },
  })
  expect(done.metadata).toEqual({ n: '0' })

  const page = await openai.batches.list({ limit: 2 })
  expect(page.data.map((b) => b.id)).toEqual([created[4], created[3]])
  expect(page.hasNextPage()).toBe(true)
  const second = await page.getNextPage()
  expect(second.data.map((b) => b.id)).toEqual([created[2], created[1]])
  const all: string[] = []
  for await (const b of openai.batches.list({ limit: 2 })) all.push(b.id)
  expect(all).toEqual([...created].reverse())
})

test('a /v1/responses batch: created, run by the reference daemon, and read back with the SDK unmodified', async () => {
  const RUNTIME_MODEL = 'sdk/responses-model'
  const entry = await makeCatalogEntry(s, {
    id: 'sdk-responses-8b-q4km',
    runtime: 'openai',
    runtime_model_id: RUNTIME_MODEL,
  })
  const openai = await client()
  // The SDK's own request type for the body of each line.
  const requests: OpenAI.Responses.ResponseCreateParamsNonStreaming[] = [
    { model: entry.id, input: 'Say hello', max_output_tokens: 16 },
    { model: entry.id, instructions: 'Be brief', input: [{ role: 'user', content: 'Say goodbye' }] },
  ]
  const content = jsonl(
    requests.map((body, i) =>
      JSON.stringify({ custom_id: `r${i}`, method: 'POST', url: '/v1/responses', body }),
    ),
  )
  const file = await openai.files.create({
    file: await toFile(Buffer.from(content), 'responses.jsonl'),
    purpose: 'batch',
  })
  const created = await openai.batches.create({
    input_file_id: file.id,
    endpoint: '/v1/responses',
    completion_window: '24h',
  })
  expect(created).toMatchObject({ object: 'batch', endpoint: '/v1/responses', status: 'validating' })
  await until('validation', async () => (await openai.batches.retrieve(created.id)).status !== 'validating')
  expect(await openai.batches.retrieve(created.id)).toMatchObject({ status: 'validated', model: entry.id })

  const u = await makeUser(s)
  const { key } = await makeWorkerKey(s, u, u.personalOrgId)
  const rt = startFakeRuntime({ models: [RUNTIME_MODEL] })
  const daemon = runAgent(daemonOptions(s.url, key, rt.url), fastDeps())
  try {
    const done = await until('completion', async () => {
      const b = await openai.batches.retrieve(created.id)
      return b.status === 'completed' ? b : null
    })
    expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 })
    expect(done.error_file_id ?? null).toBeNull()
    const text = await (await openai.files.content(done.output_file_id!)).text()
    const lines = text
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as {
            custom_id: string
            response: { status_code: number; body: OpenAI.Responses.Response }
          },
      )
    expect(lines.map((l) => l.custom_id).sort()).toEqual(['r0', 'r1'])
    for (const l of lines) {
      expect(l.response.status_code).toBe(200)
      const response = l.response.body
      expect(response.object).toBe('response')
      expect(response.model).toBe(RUNTIME_MODEL)
      const message = response.output[0] as OpenAI.Responses.ResponseOutputMessage
      const part = message.content[0] as OpenAI.Responses.ResponseOutputText
      expect(part.type).toBe('output_text')
      expect(part.text).toBe(l.custom_id === 'r0' ? 'echo: Say hello' : 'echo: Say goodbye')
      expect(response.usage).toMatchObject({ input_tokens: 7, output_tokens: 3, total_tokens: 10 })
    }
  } finally {
    daemon.agent.shutdown(true)
    expect(await daemon.done).toBe(0)
    await rt.stop()
  }
})
