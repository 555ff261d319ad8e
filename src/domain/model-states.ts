import type {
  LoadFailure,
  ModelGpus,
  ModelPullFailureRow,
  ModelPullRow,
  ModelStat,
  WorkerModelRow,
} from '../db/schema'

// docs/api.md §7 "Worker row" `models`: what a worker holds and where each model stands, from its
// model rows, the names its last heartbeat said were loading, the downloads asked of it, the
// downloads that failed and still back off, and the measurements it reported. One rule for the org
// listing, the admin listing and the dashboard.

export type ModelState =
  | 'advertised'
  | 'on_disk'
  | 'loading'
  | 'loaded'
  | 'downloading'
  | 'verifying'
  | 'download_failed'
  | 'load_failed'

export interface ModelStateRow {
  name: string
  runtime: string | null
  runtime_model_id: string
  digest: string | null
  status: string
  loaded: boolean
  state: ModelState
  /** Bytes of a download under way; null otherwise. */
  progress: { completed_bytes: number | null; total_bytes: number | null } | null
  /**
   * A failed download this worker backs off from (docs/api.md §7 model-progress), or a failed load it
   * does not try again yet (heartbeat load_failures); null otherwise.
   */
  failure: { error: string; failures: number; retry_at: number } | null
  load_seconds: number | null
  requests_per_second: number | null
  /** The GPUs a loaded (or loading) model sits on, by index, as the last heartbeat said; null otherwise. */
  gpus: number[] | null
}

type Row = Pick<
  WorkerModelRow,
  'name' | 'runtime' | 'runtime_model_id' | 'digest' | 'status' | 'loaded' | 'on_disk'
>
type Pull = Pick<
  ModelPullRow,
  'runtime' | 'runtime_model_id' | 'progress_status' | 'completed_bytes' | 'total_bytes'
>

type Failure = Pick<ModelPullFailureRow, 'runtime' | 'runtime_model_id' | 'error' | 'failures' | 'retry_at'>

export function modelStates(
  rows: readonly Row[],
  loading: readonly string[],
  pulls: readonly Pull[],
  stats: readonly ModelStat[],
  failures: readonly Failure[],
  /** Unix seconds: a back-off that ended is not shown. */
  now: number,
  placed: readonly ModelGpus[] = [],
  loadFailures: readonly LoadFailure[] = [],
): ModelStateRow[] {
  const loadingSet = new Set(loading)
  // A model on disk that failed to load there, until the worker tries it again.
  const loadFailed = new Map(loadFailures.filter((f) => f.retry_at > now).map((f) => [f.name, f]))
  const gpusOf = new Map(placed.map((p) => [p.name, p.gpus]))
  const stat = new Map(stats.map((s) => [s.name, s]))
  const measured = (name: string) => ({
    load_seconds: stat.get(name)?.load_seconds ?? null,
    requests_per_second: stat.get(name)?.requests_per_second ?? null,
  })
  const out: ModelStateRow[] = rows.map((m) => {
    const failed = !m.loaded && !loadingSet.has(m.name) ? loadFailed.get(m.name) : undefined
    return {
      name: m.name,
      runtime: m.runtime,
      runtime_model_id: m.runtime_model_id ?? m.name,
      digest: m.digest,
      status: m.status,
      loaded: m.loaded,
      state: m.loaded
        ? 'loaded'
        : loadingSet.has(m.name)
          ? 'loading'
          : failed
            ? 'load_failed'
            : m.on_disk
              ? 'on_disk'
              : 'advertised',
      progress: null,
      failure: failed ? { error: failed.error, failures: failed.failures, retry_at: failed.retry_at } : null,
      ...measured(m.name),
      gpus: m.loaded || loadingSet.has(m.name) ? (gpusOf.get(m.name) ?? null) : null,
    }
  })
  // A download under way is a model the worker does not hold yet: its own row, until the model is
  // in the inventory (verified) and the ask ends.
  const held = new Set(rows.filter((m) => m.on_disk || m.loaded).map((m) => m.name))
  for (const p of pulls) {
    if (held.has(p.runtime_model_id)) continue
    out.push({
      name: p.runtime_model_id,
      runtime: p.runtime,
      runtime_model_id: p.runtime_model_id,
      digest: null,
      status: 'downloading',
      loaded: false,
      state: p.progress_status ?? 'downloading',
      progress: { completed_bytes: p.completed_bytes, total_bytes: p.total_bytes },
      failure: null,
      ...measured(p.runtime_model_id),
      gpus: null,
    })
  }
  // A download that failed, while the worker backs off from it: neither held nor asked again yet.
  const asked = new Set(pulls.map((p) => p.runtime_model_id))
  for (const f of failures) {
    if (f.retry_at <= now || held.has(f.runtime_model_id) || asked.has(f.runtime_model_id)) continue
    out.push({
      name: f.runtime_model_id,
      runtime: f.runtime,
      runtime_model_id: f.runtime_model_id,
      digest: null,
      status: 'download_failed',
      loaded: false,
      state: 'download_failed',
      progress: null,
      failure: { error: f.error, failures: f.failures, retry_at: f.retry_at },
      ...measured(f.runtime_model_id),
      gpus: null,
    })
  }
  return out
}
