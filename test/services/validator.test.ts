import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { BatchEvent } from '../../src/lib/batch-events'
import { validateBatch } from '../../src/services/validator'
import { makeTestApp, type TestApp } from '../helpers/app'
import { getBatch, jsonl, line, makeBatch, makeCatalogEntry, validateAll } from '../helpers/batches'
import { type MadeUser, makeUser } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

// docs/api.md §6 "Validation": every code with its 1-based physical line and field, in the table's
// per-line order; the stored-error cap; CRLF, BOM and blank lines; bad input of every kind ends
// in a clear result, never a crash or a hang.

const t = makeTestApp()
afterAll(() => t.close())

// json_mode: the Responses lines below ask for JSON output (docs/api.md §6 `unsupported_capability`).
const chat = await makeCatalogEntry(t, {
  id: 'chat-8b-q4km',
  task_type: 'chat',
  capabilities: { json_mode: true },
})
const embed = await makeCatalogEntry(t, { id: 'embed-small-f16', task_type: 'embedding' })
const disabled = await makeCatalogEntry(t, { id: 'old-7b-q4km', enabled: false })
const now = t.clock.now()
await rowsOf(t.deps)
  .db.insert(rowsOf(t.deps).tables.organizations)
  .values({ id: 'org_othercompany', name: 'Other', created_at: now })
const foreign = await makeCatalogEntry(t, { id: 'secret-70b-q4km', org_id: 'org_othercompany' })

let user: MadeUser
const owner = async () => {
  user ??= await makeUser(t)
  return user
}

type Err = { code: string; line: number | null; field: string | null }

/** Creates a batch on `content`, validates it, and returns the batch object. */
async function validated(content: string | Uint8Array, body: Record<string, unknown> = {}, app: TestApp = t) {
  const u = app === t ? await owner() : await makeUser(app)
  const batch = await makeBatch(app, u, content, body)
  await validateAll(app)
  return getBatch(app, u, batch.id)
}

const codes = (b: { errors: { data: Err[] } }) => b.errors.data.map((e) => [e.code, e.line, e.field])

describe('validation codes', () => {
  test('every code of the table, with line and field, in per-line order', async () => {
    const M = chat.id
    const b = await validated(
      jsonl([
        line('r1', M), // 1: fine; the first line's model is M
        '   \t', // 2: whitespace only: skipped, still counted as a physical line
        '{"custom_id": "r3", "body": ', // 3
        '[1, 2, 3]', // 4: JSON, but not an object
        JSON.stringify({ custom_id: 'r5', body: { model: M }, extra: 1, x: 2 }), // 5
        JSON.stringify({ body: { model: M } }), // 6
        JSON.stringify({ custom_id: 'r7' }), // 7
        JSON.stringify({ custom_id: 'r8', body: {} }), // 8
        JSON.stringify({ custom_id: '', body: { model: M } }), // 9
        JSON.stringify({ custom_id: 5, body: 'x' }), // 10
        JSON.stringify({ custom_id: 'r11', body: { model: 7 } }), // 11
        line('r12', M, { method: 'GET' }), // 12
        line('r13', M, { url: '/v1/embeddings' }), // 13
        line('r1', M), // 14
        line('r15', 'no-such-model'), // 15
        line('r16', embed.id), // 16
        line('r17', disabled.id), // 17
        line('r18', foreign.id), // 18
        line('x'.repeat(513), M), // 19: custom_id over 512 characters
        JSON.stringify({ custom_id: 'r20', body: null }), // 20
        JSON.stringify({ custom_id: null, body: [] }), // 21
      ]),
    )
    expect(b.status).toBe('failed')
    expect(codes(b)).toEqual([
      ['invalid_json', 3, null],
      ['invalid_json', 4, null],
      ['unknown_fields', 5, 'extra'],
      ['unknown_fields', 5, 'x'],
      ['missing_field', 6, 'custom_id'],
      ['missing_field', 7, 'body'],
      ['missing_field', 8, 'body.model'],
      ['invalid_type', 9, 'custom_id'],
      ['invalid_type', 10, 'custom_id'],
      ['invalid_type', 10, 'body'],
      ['invalid_type', 11, 'body.model'],
      ['invalid_method', 12, 'method'],
      ['invalid_url', 13, 'url'],
      ['duplicate_custom_id', 14, 'custom_id'],
      ['unsupported_model', 15, 'body.model'],
      ['model_mismatch', 15, 'body.model'],
      ['model_mismatch', 16, 'body.model'],
      ['unsupported_endpoint', 16, 'body.model'],
      ['unsupported_model', 17, 'body.model'],
      ['model_mismatch', 17, 'body.model'],
      ['unsupported_model', 18, 'body.model'],
      ['model_mismatch', 18, 'body.model'],
      ['invalid_type', 19, 'custom_id'],
      ['invalid_type', 20, 'body'],
      ['invalid_type', 21, 'custom_id'],
      ['invalid_type', 21, 'body'],
    ])
    expect(b.errors.total).toBe(26)
    for (const e of b.errors.data) expect(e.message.length).toBeGreaterThan(0)
    // docs/api.md §6: failure stamps completed_at; docs/api.md §6 also failed_at.
    expect(b.failed_at).toBe(t.clock.now())
    expect(b.completed_at).toBe(t.clock.now())
    expect(b.model).toBe(M)
    expect(b.request_counts).toEqual({ total: 0, completed: 0, failed: 0 })
  })

  test('one line with many problems records them all in the table order', async () => {
    const b = await validated(
      jsonl([
        line('a', chat.id),
        JSON.stringify({
          zz: 1,
          custom_id: 'a',
          method: 'PUT',
          url: '/v1/x',
          body: { model: 'nope' },
          yy: 2,
        }),
      ]),
    )
    expect(codes(b)).toEqual([
      ['unknown_fields', 2, 'zz'],
      ['unknown_fields', 2, 'yy'],
      ['invalid_method', 2, 'method'],
      ['invalid_url', 2, 'url'],
      ['duplicate_custom_id', 2, 'custom_id'],
      ['unsupported_model', 2, 'body.model'],
      ['model_mismatch', 2, 'body.model'],
    ])
  })

  test('a clean file is validated with request_counts.total and model', async () => {
    const b = await validated(jsonl([line('a', chat.id), line('b', chat.id), line('c', chat.id)]))
    expect(b.status).toBe('validated')
    expect(b.model).toBe(chat.id)
    expect(b.request_counts).toEqual({ total: 3, completed: 0, failed: 0 })
    expect(b.errors).toEqual({ object: 'list', total: 0, data: [] })
    expect(b.failed_at).toBeNull()
    expect(b.completed_at).toBeNull()
  })

  test('method and url may be omitted', async () => {
    const b = await validated(jsonl([JSON.stringify({ custom_id: 'a', body: { model: chat.id } })]))
    expect(b.status).toBe('validated')
  })

  test('an entry private to one of the owner’s orgs qualifies; one of another org does not', async () => {
    const u = await makeUser(t)
    const team = 'org_myteam000000000001'
    const { db, tables } = rowsOf(t.deps)
    await db.insert(tables.organizations).values({ id: team, name: 'Team', created_at: now })
    await db
      .insert(tables.memberships)
      .values({ org_id: team, user_id: u.id, role: 'viewer', created_at: now })
    const mine = await makeCatalogEntry(t, { id: 'team-13b-q8', org_id: team })
    const ok = await makeBatch(t, u, jsonl([line('a', mine.id)]))
    const other = await makeBatch(t, await owner(), jsonl([line('a', mine.id)]))
    await validateAll(t)
    expect((await getBatch(t, u, ok.id)).status).toBe('validated')
    expect(codes(await getBatch(t, await owner(), other.id))).toEqual([
      ['unsupported_model', 1, 'body.model'],
    ])
  })

  test('embedding models serve /v1/embeddings only, and /v1/embeddings takes only embedding models', async () => {
    const emb = (id: string, model: string) =>
      JSON.stringify({ custom_id: id, url: '/v1/embeddings', body: { model, input: 'x' } })
    const good = await validated(jsonl([emb('a', embed.id)]), { endpoint: '/v1/embeddings' })
    expect(good.status).toBe('validated')
    const bad = await validated(jsonl([emb('a', chat.id)]), { endpoint: '/v1/embeddings' })
    expect(codes(bad)).toEqual([['unsupported_endpoint', 1, 'body.model']])
    const completions = await validated(
      jsonl([
        JSON.stringify({ custom_id: 'a', url: '/v1/completions', body: { model: chat.id, prompt: 'x' } }),
      ]),
      { endpoint: '/v1/completions' },
    )
    expect(completions.status).toBe('validated')
  })

  test('stream: true is unsupported_value on every endpoint; false passes (docs/api.md §6 "Request bodies")', async () => {
    const b = await validated(
      jsonl([
        line('a', chat.id),
        JSON.stringify({ custom_id: 'b', body: { model: chat.id, messages: [], stream: true } }),
        JSON.stringify({ custom_id: 'c', body: { model: chat.id, messages: [], stream: false } }),
      ]),
    )
    expect(codes(b)).toEqual([['unsupported_value', 2, 'body.stream']])
    const emb = await validated(
      jsonl([JSON.stringify({ custom_id: 'a', body: { model: embed.id, input: 'x', stream: true } })]),
      { endpoint: '/v1/embeddings' },
    )
    expect(codes(emb)).toEqual([['unsupported_value', 1, 'body.stream']])
  })

  test('empty_file: no request line at all (line null)', async () => {
    const b = await validated('  \n\n\t\r\n \n')
    expect(codes(b)).toEqual([['empty_file', null, null]])
  })

  test('1,000,000 blank lines: empty_file, read to the end', async () => {
    const before = (await t.deps.metrics.validationLines.get()).values[0]?.value ?? 0
    const b = await validated('\n'.repeat(1_000_000))
    expect(codes(b)).toEqual([['empty_file', null, null]])
    const after = (await t.deps.metrics.validationLines.get()).values[0]!.value
    expect(after - before).toBe(1_000_000)
  })
})

describe('/v1/responses (docs/api.md §6 "Request bodies")', () => {
  const R = { endpoint: '/v1/responses' }
  const resp = (id: string, body: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/responses', body, ...extra })

  test('a clean file of Responses requests is validated, string and item inputs alike', async () => {
    const b = await validated(
      jsonl([
        resp('a', { model: chat.id, input: 'Tell me a joke', max_output_tokens: 32, temperature: 0.2 }),
        resp('b', {
          model: chat.id,
          instructions: 'Answer in JSON',
          input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }],
          text: { format: { type: 'json_schema', name: 'reply', schema: { type: 'object' } } },
          tools: [{ type: 'function', name: 'lookup', parameters: {} }],
          tool_choice: 'auto',
          store: false,
          stream: false,
          top_k: 40, // not in the table: the engine's business
        }),
      ]),
      R,
    )
    expect(codes(b)).toEqual([])
    expect(b).toMatchObject({
      status: 'validated',
      endpoint: '/v1/responses',
      model: chat.id,
      needs: ['json_mode'],
    })
    expect(b.request_counts.total).toBe(2)
  })

  test('each rule with its line and field, after the line’s other checks', async () => {
    const b = await validated(
      jsonl([
        resp('a', { model: chat.id, input: 'fine' }), // 1
        resp('b', { model: chat.id }), // 2
        resp('c', { model: chat.id, input: 42 }), // 3
        resp('d', { model: chat.id, input: 'x', temperature: 3 }), // 4
        resp('e', { model: chat.id, input: 'x', max_output_tokens: 'ten' }), // 5
        resp('f', { model: chat.id, input: 'x', text: { format: { type: 'yaml' } } }), // 6
        resp('g', { model: chat.id, input: 'x', truncation: 'middle' }), // 7
        resp('h', { model: chat.id, input: 'x', tool_choice: 'always' }), // 8
        resp('i', { model: chat.id, input: 'x', stream: true }), // 9
        resp('j', { model: chat.id, input: 'x', background: true }), // 10
        resp('k', { model: chat.id, input: 'x', previous_response_id: 'resp_1' }), // 11
        resp('l', { model: chat.id, input: 'x', conversation: 'conv_1' }), // 12
        resp('m', { model: embed.id, top_p: 2 }, { url: '/v1/chat/completions' }), // 13
      ]),
      R,
    )
    expect(b.status).toBe('failed')
    expect(codes(b)).toEqual([
      ['missing_field', 2, 'body.input'],
      ['invalid_type', 3, 'body.input'],
      ['invalid_value', 4, 'body.temperature'],
      ['invalid_type', 5, 'body.max_output_tokens'],
      ['invalid_value', 6, 'body.text.format.type'],
      ['invalid_value', 7, 'body.truncation'],
      ['invalid_value', 8, 'body.tool_choice'],
      ['unsupported_value', 9, 'body.stream'],
      ['unsupported_value', 10, 'body.background'],
      ['unsupported_value', 11, 'body.previous_response_id'],
      ['unsupported_value', 12, 'body.conversation'],
      ['invalid_url', 13, 'url'],
      ['model_mismatch', 13, 'body.model'],
      ['unsupported_endpoint', 13, 'body.model'],
      ['missing_field', 13, 'body.input'],
      ['invalid_value', 13, 'body.top_p'],
    ])
    for (const e of b.errors.data)
      if (e.field!.startsWith('body.') && e.field !== 'body.model') expect(e.message).toContain(e.field!)
  })

  test('an embedding model cannot serve /v1/responses; chat, vision and text-generation entries can', async () => {
    const bad = await validated(jsonl([resp('a', { model: embed.id, input: 'x' })]), R)
    expect(codes(bad)).toEqual([['unsupported_endpoint', 1, 'body.model']])
    for (const task_type of ['vision', 'text-generation'] as const) {
      const entry = await makeCatalogEntry(t, { task_type })
      const ok = await validated(jsonl([resp('a', { model: entry.id, input: 'x' })]), R)
      expect([task_type, codes(ok)]).toEqual([task_type, []])
    }
  })

  test('a Responses body on another endpoint is not checked as one: only stream is', async () => {
    const b = await validated(jsonl([resp('a', { model: chat.id, temperature: 9 }, { url: undefined })]))
    expect(codes(b)).toEqual([])
  })
})

describe('limits', () => {
  const small = makeTestApp({ MAX_LINE_BYTES: '80', MAX_REQUESTS_PER_BATCH: '3' })
  afterAll(() => small.close())
  const entry = { id: 'm' }
  beforeAll(() => makeCatalogEntry(small, entry))
  const short = (id: string) => JSON.stringify({ custom_id: id, body: { model: entry.id } })

  test('line_too_long over MAX_LINE_BYTES (field null); a CRLF line of exactly the limit passes', async () => {
    const fits = JSON.stringify({ custom_id: 'b', body: { model: entry.id, p: '' } })
    const padded = fits.replace('"p":""', `"p":"${'x'.repeat(80 - fits.length)}"`)
    expect(padded.length).toBe(80)
    const b = await validated(`${short('a')}\n${padded}\r\n${padded.replace('"b"', '"c"')}x\n`, {}, small)
    expect(codes(b)).toEqual([['line_too_long', 3, null]])
  })

  test('too_many_requests is recorded once, on the first line beyond the limit', async () => {
    const b = await validated(
      jsonl([short('a'), '', short('b'), short('c'), '  ', short('d'), short('e')]),
      {},
      small,
    )
    expect(codes(b)).toEqual([['too_many_requests', 6, null]])
    expect(b.errors.total).toBe(1)
  })
})

describe('stored errors', () => {
  test('more than 100 errors: the first 100 stored in line order, the true total reported', async () => {
    const lines = [line('ok', chat.id), ...Array.from({ length: 149 }, (_, i) => `not json ${i}`)]
    const b = await validated(jsonl(lines))
    expect(b.errors.total).toBe(149)
    expect(b.errors.data).toHaveLength(100)
    expect(b.errors.data.map((e: Err) => e.line)).toEqual(Array.from({ length: 100 }, (_, i) => i + 2))
    const stored = (await t.deps.store.batches.errorsOf([b.id])).get(b.id) ?? []
    expect(stored).toHaveLength(100)
  })

  test('a duplicate repeated thousands of times is counted exactly', async () => {
    const lines = Array.from({ length: 5000 }, (_, i) => line(i % 2 ? 'same' : `id-${i}`, chat.id))
    const b = await validated(jsonl(lines))
    expect(b.errors.total).toBe(2499)
    expect(b.errors.data[0]).toMatchObject({ code: 'duplicate_custom_id', line: 4, field: 'custom_id' })
  })
})

describe('encodings and bad input', () => {
  test('CRLF line ends, a leading BOM and blank lines are accepted', async () => {
    const body = `\uFEFF${line('a', chat.id)}\r\n\r\n   \r\n${line('b', chat.id)}\r\n\n${line('c', chat.id)}`
    const b = await validated(body)
    expect(b.status).toBe('validated')
    expect(b.request_counts.total).toBe(3)
  })

  test('a BOM anywhere but the start of the file is not JSON', async () => {
    const b = await validated(`${line('a', chat.id)}\n\uFEFF${line('b', chat.id)}\n`)
    expect(codes(b)).toEqual([['invalid_json', 2, null]])
  })

  test('invalid UTF-8 is invalid_json', async () => {
    const good = new TextEncoder().encode(`${line('a', chat.id)}\n`)
    const bad = new TextEncoder().encode(line('b', chat.id).replace('hi', 'h\u0001'))
    bad[bad.indexOf(1)] = 0xff
    const b = await validated(new Uint8Array([...good, ...bad, 10]))
    expect(codes(b)).toEqual([['invalid_json', 2, null]])
  })

  test('binary garbage fails validation with invalid_json records', async () => {
    const bytes = new Uint8Array(256 * 1024)
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7919 + (i >> 3) * 31) & 0xff
    const b = await validated(bytes)
    expect(b.status).toBe('failed')
    expect(b.errors.total).toBeGreaterThan(0)
    expect(new Set(b.errors.data.map((e: Err) => e.code))).toEqual(new Set(['invalid_json']))
  })

  test('a 10 MB line is line_too_long without stopping the rest of the file', async () => {
    const long = JSON.stringify({
      custom_id: 'big',
      body: { model: chat.id, p: 'x'.repeat(10 * 1024 * 1024) },
    })
    const b = await validated(`${line('a', chat.id)}\n${long}\n${line('a', chat.id)}\n`)
    expect(codes(b)).toEqual([
      ['line_too_long', 2, null],
      ['duplicate_custom_id', 3, 'custom_id'],
    ])
  })

  test('JSON nested 10,000 levels deep: inside a valid body it passes; as the line it is not an object', async () => {
    const deep = '['.repeat(10_000) + ']'.repeat(10_000)
    const inBody = `{"custom_id":"a","body":{"model":"${chat.id}","x":${deep}}}`
    expect((await validated(jsonl([inBody]))).status).toBe('validated')
    expect(codes(await validated(jsonl([deep])))).toEqual([['invalid_json', 1, null]])
  })
})

describe('the validator run', () => {
  test('publishes errors (first 100), throttled progress and done on the bus', async () => {
    const u = await owner()
    // 120 invalid lines, then 3000 lines with an unknown field `pad` (2 MB: several chunks).
    const lines = [
      ...Array.from({ length: 120 }, () => 'nope'),
      ...Array.from({ length: 3000 }, (_, i) => line(`r${i}`, chat.id, { pad: 'y'.repeat(600) })),
    ]
    const batch = await makeBatch(t, u, jsonl(lines))
    const seen: BatchEvent[] = []
    const off = t.deps.batchEvents.subscribe(batch.id, (e) => seen.push(e))
    const outcome = await validateBatch(t.deps, batch.id)
    off()
    expect(outcome).toMatchObject({ status: 'failed', errors_total: 3120, request_lines: 3120 })
    // The manual clock stands still: at most one progress per 250 ms means exactly one here,
    // although the file spans several chunks.
    expect(seen.filter((e) => e.event === 'progress')).toHaveLength(1)
    expect(seen.filter((e) => e.event === 'error')).toHaveLength(100)
    expect(seen.at(-1)).toEqual({
      event: 'done',
      data: {
        batch_id: batch.id,
        status: 'failed',
        request_counts: { total: 0, completed: 0, failed: 0 },
        errors_total: 3120,
      },
    })
    expect(t.deps.batchEvents.liveRun(batch.id)).toBeUndefined()
  })

  test('a run younger than the progress interval tells only this process; an older one tells the other instances', async () => {
    const u = await owner()
    const lines = Array.from({ length: 3000 }, (_, i) => line(`r${i}`, chat.id, { pad: 'y'.repeat(600) }))
    // What the other instances hear (docs/api.md §12: the signals forwarder taps published events).
    const forwarded = (id: string) => {
      const seen: string[] = []
      const off = t.deps.batchEvents.onPublish((batchId, e) => {
        if (batchId === id && e.event !== 'error') seen.push(e.event)
      })
      return { seen, off }
    }
    const short = await makeBatch(t, u, jsonl(lines))
    const shortSeen: string[] = []
    const offShort = t.deps.batchEvents.subscribe(short.id, (e) => shortSeen.push(e.event))
    const shortForwarded = forwarded(short.id)
    await validateBatch(t.deps, short.id)
    offShort()
    shortForwarded.off()
    expect(shortSeen.filter((e) => e === 'progress')).toHaveLength(1)
    expect(shortForwarded.seen).toEqual(['done'])

    // The clock moves 300 ms at the first progress: the next chunk's progress goes out too.
    const long = await makeBatch(t, u, jsonl(lines))
    const offLong = t.deps.batchEvents.subscribe(long.id, (e) => {
      if (e.event === 'progress') t.clock.advance(0.3)
    })
    const longForwarded = forwarded(long.id)
    await validateBatch(t.deps, long.id)
    offLong()
    longForwarded.off()
    expect(longForwarded.seen[0]).toBe('progress')
    expect(longForwarded.seen.at(-1)).toBe('done')
  })

  test('a batch that is no longer validating is left alone', async () => {
    const b = await validated(jsonl([line('a', chat.id)]))
    expect(await validateBatch(t.deps, b.id)).toBeNull()
  })

  test('yields to the event loop while reading a large file', async () => {
    const u = await owner()
    const pad = 'z'.repeat(4000)
    const lines = Array.from({ length: 6000 }, (_, i) => line(`r${i}`, chat.id, { pad }))
    const batch = await makeBatch(t, u, jsonl(lines))
    let ticks = 0
    let running = true
    const tick = () => {
      ticks++
      if (running) setImmediate(tick)
    }
    setImmediate(tick)
    const outcome = await validateBatch(t.deps, batch.id)
    running = false
    expect(outcome?.status).toBe('failed')
    expect(ticks).toBeGreaterThan(1)
  })
})
