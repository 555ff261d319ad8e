import { ENGINES, type Engine } from './catalogue'

// Capabilities (docs/api.md §4 "capabilities", §6 `unsupported_capability`, §7 "Runtime
// capabilities"): what a batch line asks of the model beyond plain text, what a catalogue entry
// can do, what a worker's engine can do, and the effective capability — the entry's AND the
// engine's. Decided here once: validation records what a batch needs, the claim hands a batch only
// to a worker whose engine has all of it, and the daemon reports its engine's.

export const CAPABILITIES = ['json_mode', 'vision', 'embeddings', 'logprobs'] as const
export type Capability = (typeof CAPABILITIES)[number]

/** What a daemon may report of one runtime (docs/api.md §7 registration): a missing key is the engine's default. */
export type CapabilityReport = Partial<Record<Capability, boolean>>

const ALL: readonly Capability[] = CAPABILITIES

/**
 * docs/api.md §7 "Runtime capabilities": what each engine can do when its daemon reports nothing.
 * TGI serves no embeddings (that is a separate server, TEI); LM Studio returns no log probabilities.
 */
export const ENGINE_CAPABILITIES: Record<Engine, readonly Capability[]> = {
  ollama: ALL,
  vllm: ALL,
  'llama.cpp': ALL,
  sglang: ALL,
  tgi: ['json_mode', 'vision', 'logprobs'],
  lmstudio: ['json_mode', 'vision', 'embeddings'],
  openai: ALL,
}

const isEngine = (e: string): e is Engine => (ENGINES as readonly string[]).includes(e)

/** The capabilities of a runtime: each reported value, else the engine's default (none for an unknown engine). */
export function runtimeCapabilities(
  engine: string,
  reported: CapabilityReport | null | undefined,
): Capability[] {
  const defaults = isEngine(engine) ? ENGINE_CAPABILITIES[engine] : []
  return CAPABILITIES.filter((c) => reported?.[c] ?? defaults.includes(c))
}

/**
 * docs/api.md §4: what a catalogue entry's model can do — its `capabilities` set to true; an
 * `embedding` entry has `embeddings` and a `vision` entry has `vision` whatever they say.
 */
export function modelCapabilities(entry: {
  capabilities: Record<string, boolean> | null
  task_type: string | null
}): Capability[] {
  return CAPABILITIES.filter(
    (c) =>
      entry.capabilities?.[c] === true ||
      (c === 'embeddings' && entry.task_type === 'embedding') ||
      (c === 'vision' && entry.task_type === 'vision'),
  )
}

/** docs/api.md §2 "effective capability is model AND runtime". */
export const effectiveCapabilities = (model: readonly Capability[], runtime: readonly Capability[]) =>
  model.filter((c) => runtime.includes(c))

/** One capability a batch line asks for, and the first field of the line that asks for it. */
export interface LineNeed {
  capability: Capability
  field: string
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)
const JSON_FORMATS: readonly unknown[] = ['json_object', 'json_schema']
/** Present and asking for something: not absent, null or false. */
const asks = (v: unknown) => v !== undefined && v !== null && v !== false

/** `path[i].content[j]` of the first content part of type `type` in a list of messages, or null. */
function firstPart(messages: unknown, path: string, type: string): string | null {
  if (!Array.isArray(messages)) return null
  for (let i = 0; i < messages.length; i++) {
    const content = isObject(messages[i]) ? messages[i].content : undefined
    if (!Array.isArray(content)) continue
    for (let j = 0; j < content.length; j++) {
      const part = content[j]
      if (isObject(part) && part.type === type) return `${path}[${i}].content[${j}]`
    }
  }
  return null
}

/**
 * docs/api.md §6 `unsupported_capability`: what one line's `body` asks for, each capability once with
 * the first field asking for it, in CAPABILITIES order. `/v1/responses` lines are read by that
 * API's field names (`text.format`, `input_image` parts, `top_logprobs`, `include`); every other
 * endpoint by the chat and completions names (`response_format`, `image_url` parts, `logprobs`,
 * `top_logprobs`). What an endpoint itself needs is endpointNeeds.
 */
export function lineNeeds(endpoint: string, body: Record<string, unknown>): LineNeed[] {
  const out: LineNeed[] = []
  const need = (capability: Capability, field: string | null) => {
    if (field !== null) out.push({ capability, field })
  }
  if (endpoint === '/v1/responses') {
    const format = isObject(body.text) ? body.text.format : undefined
    need('json_mode', isObject(format) && JSON_FORMATS.includes(format.type) ? 'body.text.format' : null)
    need('vision', firstPart(body.input, 'body.input', 'input_image'))
    need(
      'logprobs',
      asks(body.top_logprobs)
        ? 'body.top_logprobs'
        : Array.isArray(body.include) && body.include.includes('message.output_text.logprobs')
          ? 'body.include'
          : null,
    )
    return out
  }
  const format = body.response_format
  need('json_mode', isObject(format) && JSON_FORMATS.includes(format.type) ? 'body.response_format' : null)
  need('vision', firstPart(body.messages, 'body.messages', 'image_url'))
  need(
    'logprobs',
    asks(body.logprobs) ? 'body.logprobs' : asks(body.top_logprobs) ? 'body.top_logprobs' : null,
  )
  return out
}

/** docs/api.md §6: what a batch needs because of its endpoint (an embedding run needs `embeddings`). */
export const endpointNeeds = (endpoint: string): Capability[] =>
  endpoint === '/v1/embeddings' ? ['embeddings'] : []

/**
 * How a batch's needs are stored (`batches.needs`): the names in CAPABILITIES order joined by
 * commas, '' for none. One spelling per set, so the claim finds a set by equality (an index probe).
 */
export const needsKey = (needs: Iterable<Capability>): string => {
  const set = new Set(needs)
  return CAPABILITIES.filter((c) => set.has(c)).join(',')
}

/** The stored needs read back (unknown names, from a newer server, are kept: nothing has them). */
export const needsOf = (key: string): string[] => (key === '' ? [] : key.split(','))

/**
 * docs/api.md §7 Poll rule 7: the stored needs a worker whose effective capabilities are `has` may
 * take — the key of every subset of `has` (at most 2⁴), the empty need first.
 */
export function takeableNeeds(has: readonly Capability[]): string[] {
  const own = CAPABILITIES.filter((c) => has.includes(c))
  const keys: string[] = []
  for (let mask = 0; mask < 1 << own.length; mask++) {
    keys.push(needsKey(own.filter((_, i) => mask & (1 << i))))
  }
  return keys
}

/** Whether `has` covers every one of `needs` (a stored key's names). */
export const covers = (has: readonly string[], needs: readonly string[]) =>
  needs.every((n) => has.includes(n))
