import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type LlamaServer, startLlamaServer } from '../../scripts/llama-server'
import { type ExecutorOptions, executeJob } from '../../src/daemon/executor'
import { reportCachedTokens } from '../../src/daemon/runtimes/cached-tokens'
import { ownChild } from '../helpers/children'
import { tinyModelPath, withRealEngine } from '../helpers/llama'

// docs/worker.md "Cached prompt tokens": each output line's usage carries the prompt tokens the engine
// served from its cache as OpenAI names them (usage.prompt_tokens_details.cached_tokens;
// usage.input_tokens_details.cached_tokens in a Responses answer). Engines that say so already keep
// their bytes; an older llama-server's timings.cache_n is copied there; an engine that says nothing
// (Ollama) gets nothing made up.

const dir = mkdtempSync(join(tmpdir(), 'gk-cached-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0

function files(lines: object[]) {
  const input = join(dir, `in-${++n}.jsonl`)
  writeFileSync(input, lines.map((l) => JSON.stringify(l)).join('\n') + '\n')
  return { input, output: join(dir, `out-${n}.jsonl`) }
}

const outputLines = (path: string) => readFileSync(path, 'utf8').split('\n').filter(Boolean)

const opts = (url: string, o: Partial<ExecutorOptions> = {}): ExecutorOptions => ({
  runtimeUrl: url,
  concurrency: 1,
  tries: 1,
  requestTimeoutMs: 30_000,
  backoff: { baseMs: 1, maxMs: 5 },
  ...o,
})

/** A chat answer as an older llama-server gives it: the cache only in `timings`. */
const olderChat = (cacheN: number) => ({
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  usage: { completion_tokens: 3, prompt_tokens: 339, total_tokens: 342 },
  timings: { cache_n: cacheN, prompt_n: 339 - cacheN, predicted_n: 3 },
})

describe('reportCachedTokens', () => {
  test('an older llama-server’s timings.cache_n becomes usage.prompt_tokens_details.cached_tokens', () => {
    const body = olderChat(305)
    expect(reportCachedTokens(body)).toBe(true)
    expect(body.usage as object).toEqual({
      completion_tokens: 3,
      prompt_tokens: 339,
      total_tokens: 342,
      prompt_tokens_details: { cached_tokens: 305 },
    })
    // The timings stay as the engine gave them.
    expect(body.timings.cache_n).toBe(305)
    // A first request, nothing cached yet: 0 is a count too.
    const first = olderChat(0)
    expect(reportCachedTokens(first)).toBe(true)
    expect(first.usage).toMatchObject({ prompt_tokens_details: { cached_tokens: 0 } })
  })

  test('details that lack the count keep their other fields', () => {
    const body = {
      usage: { prompt_tokens: 9, prompt_tokens_details: { audio_tokens: 0 } },
      timings: { cache_n: 4 },
    }
    expect(reportCachedTokens(body)).toBe(true)
    expect(body.usage.prompt_tokens_details as object).toEqual({ audio_tokens: 0, cached_tokens: 4 })
  })

  test('a Responses answer gets usage.input_tokens_details.cached_tokens (OpenAI’s Response.usage)', () => {
    const body = {
      object: 'response',
      usage: { input_tokens: 307, output_tokens: 3, total_tokens: 310 },
      timings: { cache_n: 273 },
    }
    expect(reportCachedTokens(body)).toBe(true)
    expect(body.usage as object).toEqual({
      input_tokens: 307,
      output_tokens: 3,
      total_tokens: 310,
      input_tokens_details: { cached_tokens: 273 },
    })
  })

  test('an engine’s own count wins; an answer without timings (Ollama, vLLM) or usage is left alone', () => {
    const recent = {
      usage: { prompt_tokens: 339, prompt_tokens_details: { cached_tokens: 305 } },
      timings: { cache_n: 1 },
    }
    const untouched = [
      recent,
      { usage: { input_tokens: 3, input_tokens_details: { cached_tokens: 2 } }, timings: { cache_n: 1 } },
      { usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } },
      { timings: { cache_n: 4 } },
      { usage: { prompt_tokens: 7 }, timings: { cache_n: -1 } },
      { usage: { prompt_tokens: 7 }, timings: { cache_n: 1.5 } },
      { usage: { prompt_tokens: 7 }, timings: { cache_n: '4' } },
      { usage: { prompt_tokens: 7, prompt_tokens_details: 'x' }, timings: { cache_n: 4 } },
      {
        usage: { prompt_tokens: 7, prompt_tokens_details: { cached_tokens: null } },
        timings: { cache_n: 4 },
      },
      null,
      [1],
      'text',
    ]
    for (const body of untouched) {
      const before = JSON.stringify(body)
      expect(reportCachedTokens(body)).toBe(false)
      expect(JSON.stringify(body)).toBe(before)
    }
  })
})

describe('executor output lines', () => {
  test('an older llama-server’s answer is written with the cached tokens; another engine’s bytes are kept', async () => {
    // One engine answering as an older llama-server does for `old`, as Ollama's /v1 does for `plain`.
    const plain = '{"object":"chat.completion","choices":[],"usage":{"prompt_tokens":7,"total_tokens":7}}'
    const srv = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      async fetch(req) {
        const body = (await req.json()) as { messages: { content: string }[] }
        const text = body.messages[0]!.content === 'old' ? JSON.stringify(olderChat(305)) : plain
        return new Response(text, { headers: { 'content-type': 'application/json' } })
      },
    })
    try {
      const f = files(
        ['old', 'plain'].map((content) => ({
          custom_id: content,
          body: { model: 'm', messages: [{ role: 'user', content }] },
        })),
      )
      const counts = await executeJob(
        f.input,
        f.output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(`http://127.0.0.1:${srv.port}`),
      )
      expect(counts).toEqual({ read: 2, completed: 2, failed: 0 })
      const lines = Object.fromEntries(outputLines(f.output).map((l) => [JSON.parse(l).custom_id, l]))
      expect(JSON.parse(lines.old!).response.body.usage).toEqual({
        completion_tokens: 3,
        prompt_tokens: 339,
        total_tokens: 342,
        prompt_tokens_details: { cached_tokens: 305 },
      })
      // The engine's bytes, unchanged, inside the output line.
      expect(lines.plain).toContain(`"body":${plain}}`)
    } finally {
      await srv.stop(true)
    }
  })
})

withRealEngine('cached prompt tokens from llama-server', (engine) => {
  let llama: LlamaServer
  beforeAll(async () => {
    // One slot: every request after the first finds the shared prefix in the slot's cache.
    llama = ownChild(
      await startLlamaServer({ engine, modelPath: await tinyModelPath(), slots: 1, contextPerSlot: 1024 }),
    )
  })
  afterAll(async () => {
    await llama?.stop()
  })

  const shared = 'Answer briefly, in the manner of the examples that follow. '.repeat(4)

  test('chat and completions: the line’s cached tokens are the engine’s timings.cache_n, and the prefix is served from the cache', async () => {
    for (const [endpoint, body] of [
      [
        '/v1/chat/completions',
        (i: number) => ({
          model: 'tiny',
          messages: [
            { role: 'system', content: shared },
            { role: 'user', content: `question ${i}` },
          ],
          max_tokens: 2,
          cache_prompt: true,
        }),
      ],
      [
        '/v1/completions',
        (i: number) => ({
          model: 'tiny',
          prompt: `${shared}question ${i}`,
          max_tokens: 2,
          cache_prompt: true,
        }),
      ],
    ] as const) {
      const f = files([1, 2, 3].map((i) => ({ custom_id: `q${i}`, body: body(i) })))
      const counts = await executeJob(f.input, f.output, { model: llama.modelId, endpoint }, opts(llama.url))
      expect(counts).toEqual({ read: 3, completed: 3, failed: 0 })
      const bodies = outputLines(f.output).map((l) => JSON.parse(l).response.body)
      for (const b of bodies) {
        expect(b.usage.prompt_tokens_details.cached_tokens).toBe(b.timings.cache_n)
        // What an older build's answer (timings only) becomes is what this build reports itself.
        const older = structuredClone(b)
        delete older.usage.prompt_tokens_details
        expect(reportCachedTokens(older)).toBe(true)
        expect(older.usage).toEqual(b.usage)
      }
      // Requests in order on one slot: the second and third reuse the shared prefix.
      for (const b of bodies.slice(1)) {
        expect(b.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(shared.length / 2)
        expect(b.usage.prompt_tokens_details.cached_tokens).toBeLessThan(b.usage.prompt_tokens)
      }
    }
  })

  test('the Responses API: usage.input_tokens_details.cached_tokens', async () => {
    const f = files(
      [1, 2].map((i) => ({
        custom_id: `r${i}`,
        body: { model: 'tiny', input: `${shared}question ${i}`, max_output_tokens: 2 },
      })),
    )
    const counts = await executeJob(
      f.input,
      f.output,
      { model: llama.modelId, endpoint: '/v1/responses' },
      opts(llama.url),
    )
    expect(counts).toEqual({ read: 2, completed: 2, failed: 0 })
    const [first, second] = outputLines(f.output).map((l) => JSON.parse(l).response.body.usage)
    expect(first.input_tokens_details.cached_tokens).toBeLessThan(first.input_tokens)
    expect(second.input_tokens_details.cached_tokens).toBeGreaterThan(shared.length / 2)
  })
})
