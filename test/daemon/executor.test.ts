import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type ExecutorOptions, executeJob, RuntimeUnavailableError } from '../../src/daemon/executor'
import { requestDefaults } from '../../src/daemon/runtimes'
import { readLines } from '../../src/lib/read-lines'
import { startFakeRuntime } from '../helpers/fake-runtime'

const dir = mkdtempSync(join(tmpdir(), 'gk-exec-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0

const RUNTIME_MODEL = 'Qwen/Qwen2.5-0.5B-Instruct'
const chat = (id: string, content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    custom_id: id,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: 'qwen2-5-0-5b-instruct-q4km', messages: [{ role: 'user', content }], ...extra },
  })

function files(lines: string[]) {
  const input = join(dir, `in-${++n}.jsonl`)
  writeFileSync(input, lines.join('\n') + '\n')
  return { input, output: join(dir, `out-${n}.jsonl`) }
}

const readOutput = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))

const opts = (url: string, o: Partial<ExecutorOptions> = {}): ExecutorOptions => ({
  runtimeUrl: url,
  concurrency: 8,
  tries: 3,
  requestTimeoutMs: 5000,
  backoff: { baseMs: 1, maxMs: 5 },
  ...o,
})

const byId = (out: any[]) => Object.fromEntries(out.map((l) => [l.custom_id, l]))

describe('executor: output format and routing', () => {
  test('every line becomes one OpenAI batch output record; body.model is the runtime model', async () => {
    const rt = startFakeRuntime({ models: [RUNTIME_MODEL] })
    try {
      const { input, output } = files([chat('a', 'hello'), '', chat('b', 'world', { stream: true }), '   '])
      const counts = await executeJob(
        input,
        output,
        { model: RUNTIME_MODEL, endpoint: '/v1/chat/completions' },
        opts(rt.url),
      )
      expect(counts).toEqual({ read: 2, completed: 2, failed: 0 })
      const out = readOutput(output)
      expect(out).toHaveLength(2)
      const a = byId(out).a
      expect(Object.keys(a).sort()).toEqual(['custom_id', 'error', 'id', 'response'])
      expect(a.id).toMatch(/^batch_req_/)
      expect(a.error).toBeNull()
      expect(a.response.status_code).toBe(200)
      expect(a.response.request_id).toMatch(/^rt-\d+$/) // the runtime's x-request-id
      expect(a.response.body.choices[0].message.content).toBe('echo: hello')
      expect(a.response.body.model).toBe(RUNTIME_MODEL)
      expect(new Set(out.map((l) => l.id)).size).toBe(2)
      // The catalogue slug never reaches the runtime.
      expect([...rt.models]).toEqual([RUNTIME_MODEL])
    } finally {
      await rt.stop()
    }
  })

  test('an output file left from an earlier attempt is replaced, not written over', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    try {
      const { input, output } = files([chat('a', 'x')])
      writeFileSync(output, 'stale bytes of an earlier run\n'.repeat(100))
      await executeJob(input, output, { model: 'm', endpoint: '/v1/chat/completions' }, opts(rt.url))
      expect(readOutput(output).map((l) => l.custom_id)).toEqual(['a'])
    } finally {
      await rt.stop()
    }
  })

  test('completions and embeddings go to the job endpoint on the runtime', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    try {
      const c = files([JSON.stringify({ custom_id: 'c1', body: { model: 'x', prompt: 'p' } })])
      await executeJob(c.input, c.output, { model: 'm', endpoint: '/v1/completions' }, opts(rt.url))
      expect(readOutput(c.output)[0].response.body.object).toBe('text_completion')
      const e = files([JSON.stringify({ custom_id: 'e1', body: { model: 'x', input: 'p' } })])
      await executeJob(e.input, e.output, { model: 'm', endpoint: '/v1/embeddings' }, opts(rt.url))
      const line = readOutput(e.output)[0]
      expect(line.response.body.data[0].embedding).toEqual([0.1, 0.2, 0.3])
      // No request id from the runtime: one is made up.
      expect(line.response.request_id).toMatch(/^req_/)
    } finally {
      await rt.stop()
    }
  })

  test('responses go to the runtime’s /v1/responses with the runtime model, never streamed (docs/api.md §6)', async () => {
    const seen: any[] = []
    const rt = startFakeRuntime({ models: ['m'], onRequest: (b) => seen.push(b) })
    try {
      const r = files([
        JSON.stringify({
          custom_id: 'r1',
          method: 'POST',
          url: '/v1/responses',
          body: { model: 'tiny-q4km', input: 'hello', instructions: 'Be brief', max_output_tokens: 8 },
        }),
        JSON.stringify({
          custom_id: 'r2',
          body: { model: 'tiny-q4km', input: [{ role: 'user', content: 'world' }], stream: true },
        }),
      ])
      const counts = await executeJob(
        r.input,
        r.output,
        { model: 'm', endpoint: '/v1/responses' },
        opts(rt.url),
      )
      expect(counts).toEqual({ read: 2, completed: 2, failed: 0 })
      const out = byId(readOutput(r.output))
      expect(out.r1.response.status_code).toBe(200)
      expect(out.r1.response.body).toMatchObject({
        object: 'response',
        model: 'm',
        output: [{ type: 'message', content: [{ type: 'output_text', text: 'echo: hello' }] }],
        usage: { input_tokens: 7, output_tokens: 3, total_tokens: 10 },
      })
      expect(out.r2.response.body.output[0].content[0].text).toBe('echo: world')
      // Everything but model (and stream) reaches the engine as the line gave it.
      const byInput = Object.fromEntries(seen.map((b) => [JSON.stringify(b.input), b]))
      expect(byInput['"hello"']).toEqual({
        model: 'm',
        input: 'hello',
        instructions: 'Be brief',
        max_output_tokens: 8,
      })
      expect(byInput[JSON.stringify([{ role: 'user', content: 'world' }])].stream).toBe(false)
      expect([...rt.models]).toEqual(['m'])
    } finally {
      await rt.stop()
    }
  })

  test('a multi-line JSON answer is re-encoded onto one line', async () => {
    const srv = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      fetch: () => new Response('{\n  "ok": true\n}', { headers: { 'content-type': 'application/json' } }),
    })
    try {
      const { input, output } = files([chat('a', 'x'), chat('b', 'y')])
      await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(`http://127.0.0.1:${srv.port}`),
      )
      const raw = readFileSync(output, 'utf8').trim().split('\n')
      expect(raw).toHaveLength(2)
      expect(JSON.parse(raw[0]!).response.body).toEqual({ ok: true })
    } finally {
      await srv.stop(true)
    }
  })

  test('a non-JSON success is an error line; a line whose body is not an object is an error line', async () => {
    const srv = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('<html>hi</html>') })
    try {
      const { input, output } = files([chat('a', 'x'), JSON.stringify({ custom_id: 'b', body: [1] })])
      const counts = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(`http://127.0.0.1:${srv.port}`),
      )
      expect(counts).toEqual({ read: 2, completed: 0, failed: 2 })
      const out = byId(readOutput(output))
      expect(out.a).toMatchObject({ response: null, error: { code: 'invalid_response' } })
      expect(out.b).toMatchObject({ response: null, error: { code: 'invalid_request' } })
    } finally {
      await srv.stop(true)
    }
  })
})

describe('executor: retries and per-line failures', () => {
  test('429 and 5xx are retried with backoff until they succeed', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    try {
      const { input, output } = files([
        chat('a', '#500x2'),
        chat('b', '#429x2'),
        chat('c', '#503x1'),
        chat('d', 'plain'),
      ])
      const counts = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url),
      )
      expect(counts).toMatchObject({ completed: 4, failed: 0 })
      // 3 + 3 + 2 + 1 attempts.
      expect(rt.requests).toBe(9)
      for (const l of readOutput(output)) expect(l.response.status_code).toBe(200)
    } finally {
      await rt.stop()
    }
  })

  test('a request that keeps failing is recorded with its status and the job goes on', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    try {
      const { input, output } = files([
        chat('bad', '#500'),
        chat('limited', '#429'),
        chat('client', '#400'),
        chat('good', 'ok'),
      ])
      const counts = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url, { tries: 3 }),
      )
      expect(counts).toEqual({ read: 4, completed: 1, failed: 3 })
      const out = byId(readOutput(output))
      expect(out.bad).toMatchObject({ response: { status_code: 500 }, error: null })
      expect(out.bad.response.body.error.message).toBe('injected 500')
      expect(out.limited.response.status_code).toBe(429)
      expect(out.client.response.status_code).toBe(400)
      expect(out.good.response.status_code).toBe(200)
      // 500 and 429 tried 3 times each; a 400 is not retried.
      expect(rt.requests).toBe(3 + 3 + 1 + 1)
    } finally {
      await rt.stop()
    }
  })

  test('Retry-After on a 429 is honoured, up to its cap', async () => {
    // Each job's request: one 429 with this hint, then a success.
    const hints = ['0.2', null, '3600', null, '3600', null]
    let calls = 0
    const srv = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      fetch: () => {
        const hint = hints[calls++]
        return hint
          ? new Response('{}', { status: 429, headers: { 'retry-after': hint } })
          : Response.json({ ok: true })
      },
    })
    try {
      // The waits the executor asks its clock for, granted at once.
      const asked: number[] = []
      const timers = { nowMs: () => Date.now(), sleep: async (ms: number) => void asked.push(ms) }
      const { input, output } = files([chat('a', 'x')])
      const run = (backoff: ExecutorOptions['backoff']) =>
        executeJob(
          input,
          output,
          { model: 'm', endpoint: '/v1/chat/completions' },
          opts(`http://127.0.0.1:${srv.port}`, { timers, backoff, tries: 2 }),
        )
      expect((await run({ baseMs: 1, maxMs: 5 })).completed).toBe(1)
      // The hint, not the 1–5 ms backoff; then an hour's hint cut to the default cap, or to the policy's.
      expect(asked).toEqual([200])
      await run({ baseMs: 1, maxMs: 5 })
      expect(asked).toEqual([200, 60_000])
      expect((await run({ baseMs: 1, maxMs: 5, maxRetryAfterMs: 1_000 })).completed).toBe(1)
      expect(asked).toEqual([200, 60_000, 1_000])
    } finally {
      await srv.stop(true)
    }
  })

  test('dropped connections are retried; one that always drops is an error line while the runtime lives', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    try {
      const { input, output } = files([chat('once', '#dropx1'), chat('always', '#drop'), chat('fine', 'x')])
      const counts = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url),
      )
      expect(counts).toEqual({ read: 3, completed: 2, failed: 1 })
      const out = byId(readOutput(output))
      expect(out.once.response.status_code).toBe(200)
      expect(out.always).toMatchObject({ response: null, error: { code: 'connection_error' } })
    } finally {
      await rt.stop()
    }
  })

  test('a connection the engine resets before answering is sent again at once on a new one, without spending a try', async () => {
    // An engine that resets the next `resets` requests before answering (llama.cpp's router does,
    // now and then, on a kept-alive connection it closed), and answers the rest.
    let resets = 0
    let received = 0
    const answer = JSON.stringify({ object: 'chat.completion', choices: [] })
    const engine = Bun.listen({
      hostname: '127.0.0.1',
      port: 0,
      socket: {
        data(socket, data) {
          // Requests only: the daemon's reachability check (a GET /) is answered, not counted.
          const post = data.toString().startsWith('POST')
          if (post) received++
          if (post && resets > 0) {
            resets--
            socket.terminate()
            return
          }
          socket.end(
            `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${answer.length}\r\nconnection: close\r\n\r\n${answer}`,
          )
        },
      },
    })
    const url = `http://127.0.0.1:${engine.port}`
    try {
      resets = 1
      const once = files([chat('a', 'x')])
      expect(
        await executeJob(
          once.input,
          once.output,
          { model: 'm', endpoint: '/v1/chat/completions' },
          opts(url, { tries: 1 }),
        ),
      ).toEqual({ read: 1, completed: 1, failed: 0 })
      expect(received).toBe(2)
      // Reset again on the new connection: that one was a try, and the only one.
      resets = 2
      received = 0
      const twice = files([chat('b', 'x')])
      expect(
        await executeJob(
          twice.input,
          twice.output,
          { model: 'm', endpoint: '/v1/chat/completions' },
          opts(url, { tries: 1 }),
        ),
      ).toEqual({ read: 1, completed: 0, failed: 1 })
      expect(received).toBe(2)
      expect(readOutput(twice.output)[0]).toMatchObject({
        response: null,
        error: { code: 'connection_error' },
      })
    } finally {
      engine.stop(true)
    }
  })

  test('a request past its timeout is retried, then an error line', async () => {
    const rt = startFakeRuntime({ models: ['m'] })
    try {
      const { input, output } = files([chat('slow', '#hang'), chat('fast', 'x')])
      const counts = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url, { requestTimeoutMs: 50, tries: 2 }),
      )
      expect(counts).toEqual({ read: 2, completed: 1, failed: 1 })
      expect(byId(readOutput(output)).slow).toMatchObject({ response: null, error: { code: 'timeout' } })
      expect(rt.requests).toBe(3)
    } finally {
      await rt.stop()
    }
  })

  test('the runtime gone mid-job stops the job with RuntimeUnavailableError', async () => {
    const rt = startFakeRuntime({ models: ['m'], latencyMs: 2 })
    const lines = Array.from({ length: 400 }, (_, i) => chat(`r${i}`, `x${i}`))
    const { input, output } = files(lines)
    let killed = false
    const err = await executeJob(
      input,
      output,
      { model: 'm', endpoint: '/v1/chat/completions' },
      opts(rt.url, {
        concurrency: 4,
        onLine: (c) => {
          if (!killed && c.completed >= 20) {
            killed = true
            void rt.stop()
          }
        },
      }),
    ).catch((e) => e)
    expect(err).toBeInstanceOf(RuntimeUnavailableError)
    expect(err.message).toContain('runtime unreachable')
    // Not every remaining line was written off as failed.
    const failed = readOutput(output).filter((l) => l.error)
    expect(failed.length).toBeLessThan(10)
  })
})

describe('executor: concurrency and streaming', () => {
  test('never more than `concurrency` requests in flight, and the bound is used', async () => {
    const rt = startFakeRuntime({ models: ['m'], latencyMs: 5 })
    try {
      const { input, output } = files(Array.from({ length: 120 }, (_, i) => chat(`c${i}`, `${i}`)))
      const counts = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url, { concurrency: 6 }),
      )
      expect(counts.completed).toBe(120)
      expect(rt.maxInFlight).toBe(6)
      // Every custom_id exactly once.
      const ids = readOutput(output).map((l) => l.custom_id)
      expect(new Set(ids).size).toBe(120)
    } finally {
      await rt.stop()
    }
  })

  test('input is read only as slots free up, and results reach the disk while the job runs', async () => {
    // The runtime answers everything but the last line at once, and never answers the last one.
    const rt = startFakeRuntime({ models: ['m'] })
    const total = 2000
    let pulled = 0
    const chunks = Array.from({ length: total }, (_, i) =>
      new TextEncoder().encode(
        chat(`s${i}`, i === total - 1 ? '#hang' : `pad-${'x'.repeat(100)}-${i}`) + '\n',
      ),
    )
    const stream = new ReadableStream<Uint8Array>(
      {
        pull(c) {
          if (pulled === chunks.length) c.close()
          else c.enqueue(chunks[pulled++]!)
        },
      },
      { highWaterMark: 0 },
    )
    const { output } = files([])
    const abort = new AbortController()
    let done = 0
    const job = executeJob(
      stream,
      output,
      { model: 'm', endpoint: '/v1/chat/completions' },
      opts(rt.url, {
        concurrency: 4,
        requestTimeoutMs: 60_000,
        signal: abort.signal,
        onLine: (c) => {
          done = c.completed
        },
      }),
    ).catch((e) => e)
    // Early on, the reader is at most a few lines ahead of the requests in flight.
    while (rt.requests < 8) await Bun.sleep(1)
    expect(pulled).toBeLessThanOrEqual(rt.requests + 4 + 2)
    while (done < total - 1) await Bun.sleep(5)
    // 1,999 results (≈ 400 KB) are on disk although the job is not over.
    expect(statSync(output).size).toBeGreaterThan(300_000)
    abort.abort(new Error('test over'))
    expect((await job).message).toBe('test over')
    await rt.stop()
  })

  test('readLines splits across chunk borders and keeps a last unterminated line', async () => {
    const enc = new TextEncoder()
    const parts = ['{"a":1}\n{"b"', ':2}\r\n\n{"c":', '3}']
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (const p of parts) c.enqueue(enc.encode(p))
        c.close()
      },
    })
    const lines: string[] = []
    for await (const [, l] of readLines(stream, 1024)) lines.push(l)
    expect(lines).toEqual(['{"a":1}', '{"b":2}', '', '{"c":3}'])
  })

  test('an aborted job stops sending requests and throws the abort reason', async () => {
    const rt = startFakeRuntime({ models: ['m'], latencyMs: 20 })
    try {
      const { input, output } = files(Array.from({ length: 200 }, (_, i) => chat(`a${i}`, `${i}`)))
      const abort = new AbortController()
      let read = 0
      const err = await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url, {
          concurrency: 2,
          signal: abort.signal,
          onLine: (c) => {
            read = c.read
            if (c.completed === 10) abort.abort(new Error('lost'))
          },
        }),
      ).catch((e) => e)
      // executeJob settles only once no request of the job is in flight and the reader has stopped:
      // nothing can send another. It stopped right after the abort: at most the two in flight more.
      expect(err.message).toBe('lost')
      expect(read).toBeLessThanOrEqual(10 + 2)
      expect(rt.requests).toBeLessThanOrEqual(10 + 2)
    } finally {
      await rt.stop()
    }
  })
})

describe('executor: a shard’s requests in its order, for the engine’s prompt cache (docs/worker.md)', () => {
  test('the lines reach the engine in the input’s order', async () => {
    const seen: string[] = []
    const rt = startFakeRuntime({ models: ['m'], onRequest: (b) => seen.push(b.messages[0].content) })
    try {
      const ids = Array.from({ length: 40 }, (_, i) => `line ${i}`)
      const { input, output } = files(ids.map((c, i) => chat(`r${i}`, c)))
      await executeJob(
        input,
        output,
        { model: 'm', endpoint: '/v1/chat/completions' },
        opts(rt.url, { concurrency: 1 }),
      )
      expect(seen).toEqual(ids)
    } finally {
      await rt.stop()
    }
  })

  test('llama.cpp requests carry cache_prompt unless the line sets it; other engines and embeddings do not', async () => {
    expect(requestDefaults('llama.cpp', '/v1/chat/completions')).toEqual({ cache_prompt: true })
    expect(requestDefaults('llama.cpp', '/v1/completions')).toEqual({ cache_prompt: true })
    expect(requestDefaults('llama.cpp', '/v1/embeddings')).toBeUndefined()
    expect(requestDefaults('vllm', '/v1/chat/completions')).toBeUndefined()
    const seen: any[] = []
    const rt = startFakeRuntime({ models: ['m'], onRequest: (b) => seen.push(b) })
    try {
      const { input, output } = files([chat('a', 'x'), chat('b', 'y', { cache_prompt: false })])
      const job = { model: 'm', endpoint: '/v1/chat/completions' }
      await executeJob(
        input,
        output,
        { ...job, defaults: requestDefaults('llama.cpp', job.endpoint) },
        opts(rt.url, { concurrency: 1 }),
      )
      expect(seen.map((b) => b.cache_prompt)).toEqual([true, false])
    } finally {
      await rt.stop()
    }
  })
})
