import type { ModelGpus, ModelPullRow, ModelStat, WorkerModelRow } from '../db/schema'

// docs/api.md §7 "Worker row" `models`: what a worker holds and where each model stands, from its
// model rows, the names its last heartbeat said were loading, the downloads asked of it and the
// measurements it reported. One rule for the org listing, the admin listing and the dashboard.

export type ModelState = 'advertised' | 'on_disk' | 'loading' | 'loaded' | 'downloading' | 'verifying'

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

export function modelStates(
  rows: readonly Row[],
  loading: readonly string[],
  pulls: readonly Pull[],
  stats: readonly ModelStat[],
  placed: readonly ModelGpus[] = [],
): ModelStateRow[] {
  const loadingSet = new Set(loading)
  const gpusOf = new Map(placed.map((p) => [p.name, p.gpus]))
  const stat = new Map(stats.map((s) => [s.name, s]))
  const measured = (name: string) => ({
    load_seconds: stat.get(name)?.load_seconds ?? null,
    requests_per_second: stat.get(name)?.requests_per_second ?? null,
  })
  const out: ModelStateRow[] = rows.map((m) => ({
    name: m.name,
    runtime: m.runtime,
    runtime_model_id: m.runtime_model_id ?? m.name,
    digest: m.digest,
    status: m.status,
    loaded: m.loaded,
    state: m.loaded ? 'loaded' : loadingSet.has(m.name) ? 'loading' : m.on_disk ? 'on_disk' : 'advertised',
    progress: null,
    ...measured(m.name),
    gpus: m.loaded || loadingSet.has(m.name) ? (gpusOf.get(m.name) ?? null) : null,
  }))
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
      ...measured(p.runtime_model_id),
      gpus: null,
    })
  }
  return out
}
