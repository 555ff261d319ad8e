import { expect, test } from 'bun:test'
import { addUsage, batchUsage } from '../../src/domain/usage'

// docs/api.md §7 upload-results `usage`: the output lines' usage summed, each number under its own
// name; the Responses API's input/output tokens also count as prompt/completion tokens (§14); of
// the nested details, the cached and the reasoning tokens count (as cached_tokens, reasoning_tokens).

const sum = (...usages: unknown[]) => {
  const total: Record<string, number> = {}
  for (const u of usages) addUsage(total, u)
  return total
}

test('chat and embedding usage: each number under its own name; nested objects are not summed but for cached and reasoning tokens', () => {
  expect(
    sum(
      {
        prompt_tokens: 5,
        completion_tokens: 7,
        total_tokens: 12,
        prompt_tokens_details: { cached_tokens: 3, audio_tokens: 1 },
        completion_tokens_details: { reasoning_tokens: 2, audio_tokens: 0 },
      },
      { prompt_tokens: 40, total_tokens: 40 },
      {
        prompt_tokens: 9,
        completion_tokens: 1,
        total_tokens: 10,
        prompt_tokens_details: { cached_tokens: 8 },
      },
    ),
  ).toEqual({
    prompt_tokens: 54,
    completion_tokens: 8,
    total_tokens: 62,
    cached_tokens: 11,
    reasoning_tokens: 2,
  })
})

test('a line without cached tokens counts none; details that are not objects of numbers count nothing', () => {
  expect(sum({ prompt_tokens: 4, total_tokens: 4 })).toEqual({ prompt_tokens: 4, total_tokens: 4 })
  expect(
    sum(
      { prompt_tokens: 1, prompt_tokens_details: null },
      { prompt_tokens: 1, prompt_tokens_details: { cached_tokens: '3' } },
      { prompt_tokens: 1, prompt_tokens_details: [3] },
      { prompt_tokens: 1, prompt_tokens_details: { cached_tokens: Number.POSITIVE_INFINITY } },
    ),
  ).toEqual({ prompt_tokens: 4 })
})

test('Responses usage counts under both names; its details as cached and reasoning tokens', () => {
  const responses = (input: number, output: number, cached: number) => ({
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 1 },
    total_tokens: input + output,
  })
  expect(sum(responses(75, 6, 0), responses(96, 4, 64))).toEqual({
    input_tokens: 171,
    output_tokens: 10,
    total_tokens: 181,
    prompt_tokens: 171,
    completion_tokens: 10,
    cached_tokens: 64,
    reasoning_tokens: 2,
  })
})

test('a line with both detail objects counts its cached tokens once, the first that has them', () => {
  expect(
    sum(
      {
        prompt_tokens: 10,
        prompt_tokens_details: { cached_tokens: 6 },
        input_tokens_details: { cached_tokens: 6 },
      },
      { prompt_tokens: 10, prompt_tokens_details: {}, input_tokens_details: { cached_tokens: 2 } },
    ),
  ).toEqual({ prompt_tokens: 20, cached_tokens: 8 })
})

test('a usage that already carries both names (a shard’s summed usage) is not counted twice', () => {
  const shard = {
    input_tokens: 10,
    output_tokens: 4,
    total_tokens: 14,
    prompt_tokens: 10,
    completion_tokens: 4,
    cached_tokens: 7,
  }
  expect(sum(shard, shard)).toEqual({
    input_tokens: 20,
    output_tokens: 8,
    total_tokens: 28,
    prompt_tokens: 20,
    completion_tokens: 8,
    cached_tokens: 14,
  })
  // A flat cached_tokens beside the details: the flat number counts, the nested one is not added.
  expect(sum({ cached_tokens: 3, prompt_tokens_details: { cached_tokens: 3 } })).toEqual({ cached_tokens: 3 })
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

test('the batch object’s usage: OpenAI’s shape of the sums, a count no line had is 0', () => {
  expect(
    batchUsage({
      prompt_tokens: 54,
      completion_tokens: 8,
      total_tokens: 62,
      cached_tokens: 11,
      input_tokens: 3,
    }),
  ).toEqual({
    input_tokens: 54,
    input_tokens_details: { cached_tokens: 11 },
    output_tokens: 8,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 62,
  })
  expect(batchUsage({})).toEqual({
    input_tokens: 0,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 0,
  })
})
