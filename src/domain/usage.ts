// A batch's usage (docs/api.md §7 upload-results `usage`): the sums of its output lines'
// `response.body.usage`, each number under its own name. The Responses API counts
// `input_tokens`/`output_tokens` where the other endpoints count `prompt_tokens`/`completion_tokens`;
// such a line counts under both names, so that usage (docs/api.md §14, which reads prompt_tokens,
// completion_tokens and total_tokens) counts a /v1/responses batch like any other.

/** The Responses API's name → the name usage reports it under. */
const ALIASES = [
  ['input_tokens', 'prompt_tokens'],
  ['output_tokens', 'completion_tokens'],
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
  // Only where the line has no number of that name: an engine giving both is not counted twice.
  for (const [from, to] of ALIASES) {
    const v = usage[from]
    if (counted(v) && !counted(usage[to])) add(total, to, v)
  }
}
