// The prompt tokens an engine served from its cache, where the output line's usage says them
// (docs/worker.md "Cached prompt tokens"; docs/api.md §7 upload-results `usage`). vLLM, SGLang and
// recent llama-server builds report them as OpenAI does, `usage.prompt_tokens_details.cached_tokens`
// (`usage.input_tokens_details.cached_tokens` in a Responses API answer); older llama-server builds
// only as `timings.cache_n`, which is copied into OpenAI's place. An answer that says neither
// (Ollama's) is left as it is: no cached tokens are made up.

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

const count = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0

/**
 * Puts `timings.cache_n` into the usage of an engine's answer `body` (in place) when the usage has no
 * cached tokens of its own; true when it changed the body.
 */
export function reportCachedTokens(body: unknown): boolean {
  if (!isObject(body) || !isObject(body.usage) || !isObject(body.timings)) return false
  const cached = body.timings.cache_n
  if (!count(cached)) return false
  const usage = body.usage
  // The Responses API names its prompt tokens input tokens (OpenAI's Response.usage).
  const name =
    'input_tokens' in usage && !('prompt_tokens' in usage) ? 'input_tokens_details' : 'prompt_tokens_details'
  const details = usage[name]
  if (details !== undefined && !isObject(details)) return false
  if (isObject(details) && details.cached_tokens !== undefined) return false
  usage[name] = { ...details, cached_tokens: cached }
  return true
}
