// docs/api.md §7 Poll rule 2: whether a model fits a worker's GPUs, one by one. A model runs on a
// number of GPUs its serving profile decides (its tensor-parallel size), and each of them must hold
// its share. Decided here once: the server's matching predicate (src/domain/matching.ts: the poll,
// pool capacity, pull asks, waiting reasons) and the reference daemon's placement
// (src/daemon/models/plan.ts) read the same rule.

/**
 * The serving-profile params that place a vLLM or SGLang model, by engine: those whose product is
 * its GPU count, and the fraction of each GPU it takes — of the GPU's total (vLLM's
 * gpu_memory_utilization) or of the memory free when it starts (SGLang's mem_fraction_static,
 * docs/worker.md "GPUs"). Every rule that reads them reads this table: the GPU count here, the
 * daemon's placement (src/daemon/models/plan.ts wants) and the flags it refuses to be given behind
 * its back (src/daemon/engines/launch-command.ts).
 */
export const PLACEMENT_PARAMS = {
  vllm: {
    gpus: ['tensor_parallel_size', 'pipeline_parallel_size'],
    fraction: 'gpu_memory_utilization',
    fraction_of: 'total',
  },
  sglang: { gpus: ['tp_size', 'pp_size'], fraction: 'mem_fraction_static', fraction_of: 'free' },
} as const satisfies Record<
  string,
  { gpus: readonly string[]; fraction: string; fraction_of: 'total' | 'free' }
>

export type PlacedEngine = keyof typeof PLACEMENT_PARAMS

export const placementParams = (engine: string) =>
  Object.hasOwn(PLACEMENT_PARAMS, engine) ? PLACEMENT_PARAMS[engine as PlacedEngine] : null

/**
 * The GPUs a model runs on with a serving profile of `runtime` and `params`: vLLM's
 * `tensor_parallel_size` × `pipeline_parallel_size`, SGLang's `tp_size` × `pp_size`, else 1 (each
 * missing or not a whole number ≥ 1 counts 1). Null for llama.cpp, which splits a model over as
 * many of its devices as it needs.
 */
export function profileGpuCount(runtime: string, params: Readonly<Record<string, unknown>>): number | null {
  const int = (k: string) => {
    const v = params[k]
    return typeof v === 'number' && Number.isInteger(v) && v >= 1 ? v : 1
  }
  if (runtime === 'llama.cpp') return null
  return placementParams(runtime)?.gpus.reduce((n, k) => n * int(k), 1) ?? 1
}

/**
 * Whether a model of `vramGb` fits GPUs of `gpusGb` GB each: `count` of them can each hold
 * vramGb ÷ count; with `count` null (llama.cpp), some number of them can (the largest ones).
 */
export function fitsGpus(gpusGb: readonly number[], vramGb: number, count: number | null): boolean {
  const largest = [...gpusGb].sort((a, b) => b - a)
  const fits = (n: number) => n >= 1 && n <= largest.length && largest[n - 1]! >= vramGb / n
  return count === null ? largest.some((_, i) => fits(i + 1)) : fits(count)
}
