import { closest } from '../lib/edit-distance'
import type { Engine } from './catalogue'

// Serving-profile `params` (docs/api.md §4): the launch settings the platform owns, per runtime.
// One table, read by the catalogue check and the startup seed (checkParams: what is kept, what is
// reported) and by the daemon, which turns them into the engine's own settings (docs/worker.md).
// For llama.cpp, vLLM and SGLang the keys are the engine's long flag names in snake_case
// (`ctx_size` is llama-server's `--ctx-size`, `max_model_len` is `vllm serve --max-model-len`);
// those engines' flags are open-ended, so the table names the common ones and a key it does not
// know still reaches the engine (a warning where it is written), whose own refusal fails the job
// with its words. Ollama's options are a closed set (its api.Options; docs/api.md of Ollama,
// "Generate a completion", options): a key outside it is an error. A runtime without a table takes
// no params. An entry is never dropped for its params: a param in error is left out of it.

export type ParamType = 'integer' | 'number' | 'boolean' | 'string' | 'strings' | 'duration'
const LLAMA_CPP: Record<string, ParamType> = {
  ctx_size: 'integer',
  n_gpu_layers: 'integer',
  parallel: 'integer',
  batch_size: 'integer',
  ubatch_size: 'integer',
  threads: 'integer',
  threads_batch: 'integer',
  flash_attn: 'string',
  cache_type_k: 'string',
  cache_type_v: 'string',
  embedding: 'boolean',
  pooling: 'string',
  mmproj: 'string',
  rope_scaling: 'string',
  rope_scale: 'number',
  rope_freq_base: 'number',
  yarn_orig_ctx: 'integer',
  n_cpu_moe: 'integer',
  cpu_moe: 'boolean',
  split_mode: 'string',
  tensor_split: 'string',
  main_gpu: 'integer',
  jinja: 'boolean',
  chat_template: 'string',
  chat_template_file: 'string',
  reasoning_format: 'string',
  override_kv: 'string',
  mlock: 'boolean',
  kv_unified: 'boolean',
  swa_full: 'boolean',
  cont_batching: 'boolean',
}

const VLLM: Record<string, ParamType> = {
  dtype: 'string',
  max_model_len: 'integer',
  gpu_memory_utilization: 'number',
  tensor_parallel_size: 'integer',
  pipeline_parallel_size: 'integer',
  quantization: 'string',
  kv_cache_dtype: 'string',
  max_num_seqs: 'integer',
  max_num_batched_tokens: 'integer',
  enforce_eager: 'boolean',
  trust_remote_code: 'boolean',
  enable_prefix_caching: 'boolean',
  enable_chunked_prefill: 'boolean',
  swap_space: 'number',
  cpu_offload_gb: 'number',
  tokenizer: 'string',
  revision: 'string',
  seed: 'integer',
  block_size: 'integer',
  load_format: 'string',
  chat_template: 'string',
  tool_call_parser: 'string',
  enable_auto_tool_choice: 'boolean',
  reasoning_parser: 'string',
  limit_mm_per_prompt: 'string',
  generation_config: 'string',
}

const SGLANG: Record<string, ParamType> = {
  dtype: 'string',
  context_length: 'integer',
  mem_fraction_static: 'number',
  tp_size: 'integer',
  dp_size: 'integer',
  quantization: 'string',
  kv_cache_dtype: 'string',
  max_running_requests: 'integer',
  max_total_tokens: 'integer',
  chunked_prefill_size: 'integer',
  trust_remote_code: 'boolean',
  enable_torch_compile: 'boolean',
  disable_radix_cache: 'boolean',
  schedule_policy: 'string',
  attention_backend: 'string',
  chat_template: 'string',
  tool_call_parser: 'string',
  reasoning_parser: 'string',
}

// Ollama's options as its API documents them (docs/api.md of Ollama, the options of "Generate
// request (With options)"; api/types.go Options and Runner), split as Ollama splits them.
/** Load-time options (api.Runner): a model loaded with others is loaded again. */
export const OLLAMA_LOAD_OPTIONS: Record<string, ParamType> = {
  num_ctx: 'integer',
  num_batch: 'integer',
  num_gpu: 'integer',
  main_gpu: 'integer',
  use_mmap: 'boolean',
  num_thread: 'integer',
  // Listed by Ollama's docs; Ollama releases without them ignore them.
  numa: 'boolean',
}
/** Sampling options: the model's defaults, which a request's own fields override. */
export const OLLAMA_SAMPLING_OPTIONS: Record<string, ParamType> = {
  num_keep: 'integer',
  seed: 'integer',
  num_predict: 'integer',
  draft_num_predict: 'integer',
  top_k: 'integer',
  top_p: 'number',
  min_p: 'number',
  typical_p: 'number',
  repeat_last_n: 'integer',
  temperature: 'number',
  repeat_penalty: 'number',
  presence_penalty: 'number',
  frequency_penalty: 'number',
  penalize_newline: 'boolean',
  stop: 'strings',
}
/** Not an option but a request field (top level): how long the model stays loaded after a request. */
export const OLLAMA_KEEP_ALIVE = 'keep_alive'

const OLLAMA: Record<string, ParamType> = {
  ...OLLAMA_LOAD_OPTIONS,
  ...OLLAMA_SAMPLING_OPTIONS,
  [OLLAMA_KEEP_ALIVE]: 'duration',
}

/** The params each runtime knows; runtimes absent here take none. */
export const SERVING_PARAMS: Partial<Record<Engine, Record<string, ParamType>>> = {
  'llama.cpp': LLAMA_CPP,
  vllm: VLLM,
  sglang: SGLANG,
  ollama: OLLAMA,
}

/** Runtimes whose settings are open-ended flags: a key the table does not know still reaches the engine. */
const OPEN_ENDED: ReadonlySet<string> = new Set<Engine>(['llama.cpp', 'vllm', 'sglang'])

// A Go duration as Ollama parses keep_alive (time.ParseDuration): "5m", "1h30m", "-1s"; "0" alone.
const GO_DURATION =
  /^(?:0|[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))*)$/

function fits(want: ParamType, value: unknown): boolean {
  switch (want) {
    case 'boolean':
    case 'string':
      return typeof value === want
    case 'integer':
      return Number.isInteger(value)
    case 'number':
      return typeof value === 'number' && Number.isFinite(value)
    case 'strings':
      return Array.isArray(value) && value.every((v) => typeof v === 'string')
    case 'duration':
      // Ollama reads a number as seconds (a negative one: stay loaded) and a string as a duration.
      return (
        (typeof value === 'number' && Number.isFinite(value)) ||
        (typeof value === 'string' && GO_DURATION.test(value))
      )
  }
}

const TYPE_NAMES: Record<ParamType, string> = {
  integer: 'an integer',
  number: 'a number',
  boolean: 'a boolean',
  string: 'a string',
  strings: 'a list of strings',
  duration: 'a number of seconds or a duration such as "10m"',
}

/** One finding about a profile's params: an `error` leaves the param out, a `warning` keeps it. */
export interface ParamNote {
  key: string
  level: 'error' | 'warning'
  message: string
}

/**
 * docs/api.md §4 params: what of `params` a profile of `runtime` keeps, and what is said about the
 * rest. A value of the wrong type is an error (left out: the engine would refuse it or take it
 * wrongly); a key the table does not know is a warning naming the closest known key for an engine
 * whose flags are open-ended (kept: it reaches the engine), an error otherwise (left out).
 */
export function checkParams(
  runtime: string,
  params: Readonly<Record<string, unknown>>,
): { params: Record<string, unknown>; notes: ParamNote[] } {
  const known = SERVING_PARAMS[runtime as Engine]
  const kept: Record<string, unknown> = {}
  const notes: ParamNote[] = []
  for (const [key, value] of Object.entries(params)) {
    const want = known?.[key]
    if (want) {
      if (fits(want, value)) kept[key] = value
      else
        notes.push({
          key,
          level: 'error',
          message: `param "${key}" must be ${TYPE_NAMES[want]} (got ${JSON.stringify(value)})`,
        })
      continue
    }
    if (!known) {
      notes.push({ key, level: 'error', message: `param "${key}": ${runtime} takes no params` })
      continue
    }
    const near = closest(key, Object.keys(known))
    const hint = near ? ` (did you mean "${near}"?)` : ''
    if (OPEN_ENDED.has(runtime)) {
      kept[key] = value
      notes.push({
        key,
        level: 'warning',
        message: `param "${key}" is not a ${runtime} setting gridkeep knows${hint}; it is passed to the engine as written`,
      })
    } else
      notes.push({ key, level: 'error', message: `param "${key}" is not an option ${runtime} knows${hint}` })
  }
  return { params: kept, notes }
}

/** `ctx_size` → `ctx-size`: the engine's long flag name. */
export const flagName = (key: string) => key.replaceAll('_', '-')

/**
 * Params as command-line flags (`vllm serve`, SGLang): `--max-model-len 16384`; `true` is the bare
 * flag and `false` leaves it out (the engine's default).
 */
export function paramFlags(params: Record<string, unknown>): string[] {
  const out: string[] = []
  for (const [key, value] of Object.entries(params)) {
    if (value === false || value === null || value === undefined) continue
    out.push(`--${flagName(key)}`)
    if (value !== true) out.push(String(value))
  }
  return out
}
