import { eq, inArray, type SQL } from 'drizzle-orm'
import { type WorkerRow, workerGpus, workerModels, workerRuntimes, workers } from '../../db/schema'
import type { Deps } from '../../deps'
import { type PageParams, pageRows, toPage } from '../../lib/pagination'
import { isOnline } from './matching'

// Worker rows for people (API.md §7 "Worker row"): GET /v1/orgs/{org_id}/workers and
// GET /v1/admin/workers. `status` is decided at read time, never trusted from storage alone.

export function toWorkerRows(deps: Deps, rows: WorkerRow[]) {
  const ids = rows.map((w) => w.id)
  const group = <T extends { worker_id: string }>(list: T[]) => {
    const m = new Map<string, T[]>()
    for (const r of list) m.set(r.worker_id, [...(m.get(r.worker_id) ?? []), r])
    return m
  }
  const gpus = group(
    ids.length ? deps.db.select().from(workerGpus).where(inArray(workerGpus.worker_id, ids)).all() : [],
  )
  const runtimes = group(
    ids.length
      ? deps.db.select().from(workerRuntimes).where(inArray(workerRuntimes.worker_id, ids)).all()
      : [],
  )
  const models = group(
    ids.length ? deps.db.select().from(workerModels).where(inArray(workerModels.worker_id, ids)).all() : [],
  )
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
    gpus: (gpus.get(w.id) ?? []).map((g) => ({
      vendor: g.vendor,
      name: g.name,
      vram_gb: g.vram_gb,
      driver: g.driver,
      cuda: g.cuda,
    })),
    runtimes: (runtimes.get(w.id) ?? []).map((r) => ({
      engine: r.engine,
      base_url: r.base_url,
      status: r.status,
    })),
    models: (models.get(w.id) ?? []).map((m) => ({
      name: m.name,
      runtime: m.runtime,
      runtime_model_id: m.runtime_model_id ?? m.name,
      digest: m.digest,
      status: m.status,
      loaded: m.loaded,
    })),
    daemon_version: w.daemon_version,
    registered_at: w.registered_at,
    last_heartbeat_at: w.last_heartbeat_at,
    uptime_seconds: w.uptime_seconds,
  }))
}

export function listWorkers(deps: Deps, orgId: string | null, query: PageParams) {
  const where: SQL | undefined = orgId === null ? undefined : eq(workers.org_id, orgId)
  const { rows, has_more } = pageRows<WorkerRow>(deps.db, workers, where, query)
  return toPage(toWorkerRows(deps, rows), has_more)
}
