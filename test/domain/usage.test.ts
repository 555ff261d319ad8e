import { expect, test } from 'bun:test'
import { addUsage } from '../../src/domain/usage'

// docs/api.md §7 upload-results `usage`: the output lines' usage summed, each number under its own
// name; the Responses API's input/output tokens also count as prompt/completion tokens (§14).

const sum = (...usages: unknown[]) => {
  const total: Record<string, number> = {}
  for (const u of usages) addUsage(total, u)
  return total
}

test('chat and embedding usage: each number under its own name; nested objects are not summed', () => {
  expect(
    sum(
      {
        prompt_tokens: 5,
        completion_tokens: 7,
        total_tokens: 12,
        prompt_tokens_details: { cached_tokens: 3 },
      },
      { prompt_tokens: 40, total_tokens: 40 },
    ),
  ).toEqual({ prompt_tokens: 45, completion_tokens: 7, total_tokens: 52 })
})

test('Responses usage counts under both names', () => {
  const responses = (input: number, output: number) => ({
    input_tokens: input,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  })
  expect(sum(responses(75, 6), responses(96, 4))).toEqual({
    input_tokens: 171,
    output_tokens: 10,
    total_tokens: 181,
    prompt_tokens: 171,
    completion_tokens: 10,
  })
})

test('a usage that already carries both names (a shard’s summed usage) is not counted twice', () => {
  const shard = {
    input_tokens: 10,
    output_tokens: 4,
    total_tokens: 14,
    prompt_tokens: 10,
    completion_tokens: 4,
  }
  expect(sum(shard, shard)).toEqual({
    input_tokens: 20,
    output_tokens: 8,
    total_tokens: 28,
    prompt_tokens: 20,
    completion_tokens: 8,
  })
  // An engine that reports one of each: each name counts once.
  expect(sum({ input_tokens: 3, completion_tokens: 2 })).toEqual({
    input_tokens: 3,
    prompt_tokens: 3,
    completion_tokens: 2,
  })
})

test('no usage, or not numbers, counts nothing; names of Object.prototype are plain names', () => {
  expect(sum(undefined, null, 'x', [1], { prompt_tokens: '5', total_tokens: Number.NaN })).toEqual({})
  const total = sum({ constructor: 2, toString: 1 }, { constructor: 3 })
  expect(Object.entries(total)).toEqual([
    ['constructor', 5],
    ['toString', 1],
  ])
})
