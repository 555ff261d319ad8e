import { describe, expect, test } from 'bun:test'
import { CHECK_BYTES, checkFile, checkJsonl, MAX_PROBLEMS } from '../../web/lib/jsonl-check'

// The browser-side check of a batch file before upload (docs/api.md §11): lines, model, first problems.

const line = (id: string, model = 'm-1', extra: Record<string, unknown> = {}) =>
  JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model }, ...extra })
const EP = '/v1/chat/completions'

describe('checkJsonl', () => {
  test('a good file: its request count and model, no problem; BOM, CRLF and blank lines are fine', () => {
    const text = `\uFEFF${line('a')}\r\n\r\n${line('b')}\n   \n${line('c')}`
    expect(checkJsonl(text, EP)).toEqual({ requests: 3, model: 'm-1', problems: [], partial: false })
  })

  test('each problem names its physical line', () => {
    const text = [
      line('a'),
      '{nope',
      '[1]',
      line('a'),
      JSON.stringify({ custom_id: '', body: { model: 'm-1' } }),
      JSON.stringify({ custom_id: 'x', body: {} }),
      JSON.stringify({ custom_id: 'y' }),
      line('z', 'm-2'),
      line('w', 'm-1', { method: 'GET', url: '/v1/embeddings', extra: 1 }),
    ].join('\n')
    expect(checkJsonl(text, EP).problems).toEqual([
      { line: 2, message: 'not valid JSON' },
      { line: 3, message: 'not a JSON object' },
      { line: 4, message: 'custom_id "a" repeats an earlier line' },
      { line: 5, message: 'custom_id is missing or empty' },
      { line: 6, message: 'body.model is missing' },
      { line: 7, message: 'body is missing' },
      { line: 8, message: 'body.model "m-2" differs from "m-1"' },
      { line: 9, message: 'unknown field "extra"' },
      { line: 9, message: 'method must be POST' },
      { line: 9, message: 'url must be /v1/chat/completions' },
    ])
  })

  test('the endpoint’s request-body rules, as the server checks them (docs/api.md §6 "Request bodies")', () => {
    const R = '/v1/responses'
    const resp = (id: string, body: Record<string, unknown>) =>
      JSON.stringify({ custom_id: id, method: 'POST', url: R, body: { model: 'm-1', ...body } })
    const text = [
      resp('a', { input: 'hello', max_output_tokens: 16 }),
      resp('b', {}),
      resp('c', { input: 'x', stream: true, temperature: 5 }),
    ].join('\n')
    expect(checkJsonl(text, R)).toEqual({
      requests: 3,
      model: 'm-1',
      problems: [
        { line: 2, message: 'body.input is required' },
        { line: 3, message: 'body.temperature must be a number from 0 to 2' },
        { line: 3, message: 'A batch request cannot stream: omit body.stream or set it to false' },
      ],
      partial: false,
    })
    // A chat line may not stream either; its other body fields are the engine's.
    expect(
      checkJsonl(line('a', 'm-1', { body: { model: 'm-1', stream: true, temperature: 5 } }), EP).problems,
    ).toEqual([{ line: 1, message: 'A batch request cannot stream: omit body.stream or set it to false' }])
  })

  test('an empty file, and only the first problems are kept', () => {
    expect(checkJsonl('\n \n', EP).problems).toEqual([
      { line: null, message: 'the file has no request line' },
    ])
    const many = Array.from({ length: 50 }, () => 'x').join('\n')
    const c = checkJsonl(many, EP)
    expect(c.requests).toBe(50)
    expect(c.problems).toHaveLength(MAX_PROBLEMS)
  })

  test('a cut text does not judge its last, possibly incomplete line', () => {
    expect(checkJsonl(`${line('a')}\n{"custom_id":"b","bo`, EP, true)).toEqual({
      requests: 1,
      model: 'm-1',
      problems: [],
      partial: true,
    })
  })
})

test('checkFile reads only the start of a large file', async () => {
  const one = `${line('a')}\n`
  const small = new File([one], 'a.jsonl')
  expect(await checkFile(small, EP)).toMatchObject({ requests: 1, partial: false })
  const big = new File([one, 'x'.repeat(CHECK_BYTES)], 'b.jsonl')
  expect(await checkFile(big, EP)).toEqual({ requests: 1, model: 'm-1', problems: [], partial: true })
})
