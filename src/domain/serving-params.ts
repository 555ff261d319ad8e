import type { Engine } from './catalogue'

// Serving-profile `params` (docs/api.md §4): the launch settings the platform owns, per runtime.
// One table, read by the catalogue check and the startup seed (a key the runtime does not know is
// refused where it is written, so a typo never reaches a GPU machine) and by the daemon, which
// turns them into the engine's own flags (docs/worker.md). Keys are the engine's long flag names in
// snake_case (`ctx_size` is llama-server's `--ctx-size`, `max_model_len` is `vllm serve
// --max-model-len`). A runtime without a table takes no params.

export type ParamType = 'integer' | 'number' | 'boolean' | 'string'

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

/** The params each runtime knows; runtimes absent here take none. */
export const SERVING_PARAMS: Partial<Record<Engine, Record<string, ParamType>>> = {
  'llama.cpp': LLAMA_CPP,
  vllm: VLLM,
  sglang: SGLANG,
}

const typeOf = (v: unknown): ParamType | null =>
  typeof v === 'boolean'
    ? 'boolean'
    : typeof v === 'string'
      ? 'string'
      : typeof v === 'number' && Number.isFinite(v)
        ? Number.isInteger(v)
          ? 'integer'
          : 'number'
        : null

/**
 * What is wrong with one profile's params, or null: the first key the runtime does not know, or
 * whose value is not of the key's type (an integer is also a number).
 */
export function paramsProblem(runtime: string, params: Record<string, unknown>): string | null {
  const known = SERVING_PARAMS[runtime as Engine]
  for (const [key, value] of Object.entries(params)) {
    const want = known?.[key]
    if (!want) return `param "${key}" is not a setting ${runtime} knows`
    const got = typeOf(value)
    if (got !== want && !(want === 'number' && got === 'integer'))
      return `param "${key}" must be ${want === 'integer' ? 'an integer' : `a ${want}`} (got ${JSON.stringify(value)})`
  }
  return null
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
