// A batch's usage (docs/api.md §7 upload-results `usage`): the sums of its output lines'
// `response.body.usage`, each number under its own name. The Responses API counts
// `input_tokens`/`output_tokens` where the other endpoints count `prompt_tokens`/`completion_tokens`;
// such a line counts under both names, so that usage (docs/api.md §14, which reads prompt_tokens,
// completion_tokens and total_tokens) counts a /v1/responses batch like any other.
// Nested objects are not summed, but for the two counts OpenAI reports inside them: the prompt
// tokens served from the engine's cache and the reasoning tokens, counted as `cached_tokens` and
// `reasoning_tokens` (docs/api.md §7).

/** The Responses API's name → the name usage reports it under. */
const ALIASES = [
  ['input_tokens', 'prompt_tokens'],
  ['output_tokens', 'completion_tokens'],
] as const

/**
 * The counts read out of a usage's nested details → the name they are summed under; the first
 * object that has it counts (chat and completions' name, then the Responses API's).
 */
const DETAILS = [
  ['cached_tokens', ['prompt_tokens_details', 'input_tokens_details']],
  ['reasoning_tokens', ['completion_tokens_details', 'output_tokens_details']],
] as const

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

const counted = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v)
// Own properties only: a name such as `constructor` must not start from what Object.prototype has.
const add = (total: Record<string, number>, k: string, v: number) => {
  total[k] = (Object.hasOwn(total, k) ? total[k]! : 0) + v
}

/** Adds one output line's `usage` (anything; only finite numbers count) into `total`. */
export function addUsage(total: Record<string, number>, usage: unknown): void {
  if (!isObject(usage)) return
  for (const [k, v] of Object.entries(usage)) {
    if (counted(v)) add(total, k, v)
  }
  // Only where the line has no number of that name: an engine giving both is not counted twice
  // (nor is a usage already summed, such as a shard's).
  for (const [from, to] of ALIASES) {
    const v = usage[from]
    if (counted(v) && !counted(usage[to])) add(total, to, v)
  }
  for (const [name, within] of DETAILS) {
    if (counted(usage[name])) continue
    for (const d of within) {
      const details = usage[d]
      const v = isObject(details) ? details[name] : undefined
      if (!counted(v)) continue
      add(total, name, v)
      break
    }
  }
}

/** docs/api.md §6: the batch object's `usage`, OpenAI's shape of a batch's token counts. */
export interface BatchUsage {
  input_tokens: number
  input_tokens_details: { cached_tokens: number }
  output_tokens: number
  output_tokens_details: { reasoning_tokens: number }
  total_tokens: number
}

/** A batch's summed usage (addUsage's names) in the batch object's shape; a count no line had is 0. */
export function batchUsage(sums: Record<string, number>): BatchUsage {
  const n = (k: string) => (Object.hasOwn(sums, k) && counted(sums[k]) ? sums[k] : 0)
  return {
    input_tokens: n('prompt_tokens'),
    input_tokens_details: { cached_tokens: n('cached_tokens') },
    output_tokens: n('completion_tokens'),
    output_tokens_details: { reasoning_tokens: n('reasoning_tokens') },
    total_tokens: n('total_tokens'),
  }
}
