import { afterAll, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { EXIT } from '../../src/client/exit'
import { InputOrder, LineTooLong, writeInInputOrder } from '../../src/client/reorder'

// docs/api.md §6 "Output order": `gridkeep results --input-order` puts a result file back into the
// input's order by custom_id (src/client/reorder.ts).

const dir = mkdtempSync(join(tmpdir(), 'gk-reorder-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

test('result lines in any order come out in the input’s order; a line the input lacks stays after the rest', async () => {
  const n = 20_000
  const ids = Array.from({ length: n }, (_, i) => `id-${(i * 7919) % n}`)
  const input = join(dir, 'input.jsonl')
  // CRLF and blank lines in the input change nothing.
  writeFileSync(
    input,
    ids.map((id) => JSON.stringify({ custom_id: id, body: { model: 'm' } })).join('\r\n\n'),
  )
  // The results: every other id, reversed, with a line of an unknown id in the middle.
  const answered = ids.filter((_, i) => i % 2 === 0)
  const lines = [...answered]
    .reverse()
    .map((id) => JSON.stringify({ custom_id: id, response: { status_code: 200 } }))
  lines.splice(5, 0, JSON.stringify({ custom_id: 'stranger', response: null }))
  const result = join(dir, 'result.jsonl')
  writeFileSync(result, `${lines.join('\n')}\n`)

  const order = await InputOrder.read(input)
  const out = join(dir, 'ordered.jsonl')
  expect(await writeInInputOrder(order, result, out)).toBe(readFileSync(result).byteLength)
  const got = readFileSync(out, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l).custom_id)
  expect(got).toEqual([...answered, 'stranger'])
})

test('a line over 64 MiB stops it with a clear message (exit 3), in the input or a result file: never left out', async () => {
  const big = JSON.stringify({ custom_id: 'big', response: { body: 'x'.repeat(64 * 1024 * 1024) } })
  const small = (id: string) => JSON.stringify({ custom_id: id, body: { model: 'm' } })
  const input = join(dir, 'input-small.jsonl')
  writeFileSync(input, [small('a'), small('big'), small('b')].join('\n'))
  const result = join(dir, 'result-big.jsonl')
  writeFileSync(result, [small('b'), big, small('a')].join('\n'))
  const order = await InputOrder.read(input)
  const out = join(dir, 'never.jsonl')
  const error = await writeInInputOrder(order, result, out, 'the result file file-x').catch((e) => e)
  expect(error).toBeInstanceOf(LineTooLong)
  expect(error.exitCode).toBe(EXIT.invalid)
  expect(error.message).toBe(
    "cannot restore the input's order: line 2 of the result file file-x is longer than 64 MiB; download it without --input-order (each line's custom_id names its request)",
  )
  expect(existsSync(out)).toBe(false)
  // The input likewise.
  const bigInput = join(dir, 'input-big.jsonl')
  writeFileSync(bigInput, [small('a'), big].join('\n'))
  const inputError = await InputOrder.read(bigInput, 'the input file file-y').catch((e) => e)
  expect(inputError).toBeInstanceOf(LineTooLong)
  expect(inputError.message).toContain('line 2 of the input file file-y is longer than 64 MiB')
})
