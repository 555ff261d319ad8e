import type { Deps } from '../../deps'
import { CAPABILITIES, runtimeCapabilities } from '../../domain/capabilities'
import { modelStates } from '../../domain/model-states'
import { type PageParams, toPage } from '../../lib/pagination'
import type { ListedWorker } from '../../store/fleet'
import { isOnline } from './liveness'

// Worker rows for people (docs/api.md §7 "Worker row"): GET /v1/orgs/{org_id}/workers and
// GET /v1/admin/workers. `status` is decided at read time, never trusted from storage alone.

export function toWorkerRows(deps: Deps, rows: ListedWorker[]) {
  return rows.map((w) => ({
    id: w.id,
    object: 'worker' as const,
    name: w.name,
    hostname: w.hostname,
    org_id: w.org_id,
    status: isOnline(deps, w) ? ('online' as const) : ('offline' as const),
    activity: w.activity,
    vram_total_gb: w.vram_total_gb,
    vram_available_gb: w.vram_available_gb,
    gpu_utilization: w.gpu_utilization,
    loaded_models: w.loaded_models,
    current_job_id: w.current_job_id,
    gpus: w.gpus.map((g, i) => {
      // docs/api.md §7 (ext): the GPU's index and its memory as the last heartbeat reported it.
      const index = g.gpu_index ?? i
      const now = w.gpu_memory.find((m) => m.index === index)
      return {
        vendor: g.vendor,
        name: g.name,
        vram_gb: g.vram_gb,
        driver: g.driver,
        cuda: g.cuda,
        index,
        memory_used_gb: now?.memory_used_gb ?? null,
        memory_total_gb: now?.memory_total_gb ?? null,
      }
    }),
    runtimes: w.runtimes.map((r) => {
      // docs/api.md §7: what the server counts this engine able to do (reported, else its default).
      const can = runtimeCapabilities(r.engine, r.capabilities)
      return {
        engine: r.engine,
        base_url: r.base_url,
        status: r.status,
        capabilities: Object.fromEntries(CAPABILITIES.map((c) => [c, can.includes(c)])),
      }
    }),
    // docs/api.md §7 "Worker row": each model held or downloading, with where it stands.
    models: modelStates(
      w.models,
      w.loading_models,
      w.pulls,
      w.model_stats,
      w.pull_failures,
      deps.clock.now(),
      w.model_gpus,
      w.load_failures,
    ),
    daemon_version: w.daemon_version,
    registered_at: w.registered_at,
    last_heartbeat_at: w.last_heartbeat_at,
    uptime_seconds: w.uptime_seconds,
    // (ext) The requests in flight the daemon settled on (its last heartbeat), docs/api.md §16.
    concurrency: w.concurrency,
    capabilities: { shards: w.shards, loads: w.loads },
  }))
}

export async function listWorkers(deps: Deps, orgId: string | null, query: PageParams) {
  const { rows, has_more } = await deps.store.fleet.listWorkers(orgId, query)
  return toPage(toWorkerRows(deps, rows), has_more)
}
