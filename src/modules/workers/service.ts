import type { Deps } from '../../deps'
import type { AuditContext } from '../../domain/audit'
import type { WorkerPrincipal } from '../../domain/principal'
import type { RequeueOutcome, RequeueReason } from '../../domain/requeue'
import { digestOrNull } from '../../lib/digest'
import { badRequest, notFound } from '../../lib/errors'
import { log } from '../../lib/logger'
import type {
  HeartbeatBody,
  InventoryItem,
  ModelProgressBody,
  ProgressBody,
  RegisterBody,
  ReportFailureBody,
} from '../../protocol/worker'
import type { HostedModelInput } from '../../store/fleet'
import type { CatalogueState } from '../catalogue/view'
import { modelsChanged } from '../catalogue/view'
import { isOnline, onlineCutoff } from './liveness'
import { notOwned, ownWorker } from './ownership'
import { removeParts } from './parts'
import { type PullItem, pullModelsFor, settlePull } from './pulls'
import type { PollState } from './waiters'
import { batchClaimable } from './waiters'

// The worker protocol (docs/api.md §7 Workers, docs/api.md §7): register, heartbeat, progress, model-progress
// and report-failure. Poll lives in claim.ts, upload-results in results.ts.

/**
 * docs/api.md §7: daemons beat every 30 s (docs/api.md §10), or every quarter of HEARTBEAT_TIMEOUT_SECONDS when
 * that is shorter (never below 1 s): a timeout set low must never make healthy workers look silent.
 */
export const heartbeatInterval = (config: Pick<Deps['config'], 'HEARTBEAT_TIMEOUT_SECONDS'>) =>
  Math.max(1, Math.min(30, Math.floor(config.HEARTBEAT_TIMEOUT_SECONDS / 4)))

// ---------------------------------------------------------------------------------------------
// POST /workers/register

function mergeInventory(rows: Map<string, HostedModelInput>, items: InventoryItem[]) {
  for (const item of items) {
    const prev = rows.get(item.local_name)
    if (prev?.on_disk) {
      prev.loaded ||= item.loaded
      continue
    }
    rows.set(item.local_name, {
      name: item.local_name,
      runtime: item.runtime,
      digest: digestOrNull(item.sha256),
      size_bytes: item.size_bytes,
      loaded: item.loaded || (prev?.loaded ?? false),
      configured: prev?.configured ?? false,
      on_disk: true,
    })
  }
}

export async function register(
  deps: Deps & CatalogueState & PollState,
  principal: WorkerPrincipal,
  body: RegisterBody,
) {
  const engines = body.runtimes.map((r) => r.engine)
  const duplicate = engines.find((e, i) => engines.indexOf(e) !== i)
  if (duplicate)
    throw badRequest('duplicate_runtime', `Runtime engine '${duplicate}' is listed twice`, 'runtimes')

  // Everything known at registration is "advertised" (docs/api.md §7 Poll rule 6): the configured names and
  // whatever the runtimes hold (docs/api.md: a worker advertises everything its runtimes hold).
  const models = new Map<string, HostedModelInput>()
  for (const name of body.models ?? []) {
    models.set(name, {
      name,
      runtime: null,
      digest: null,
      size_bytes: null,
      loaded: false,
      configured: true,
      on_disk: false,
    })
  }
  for (const r of body.runtimes) mergeInventory(models, r.inventory ?? [])

  const registered = await deps.store.fleet.register({
    orgId: principal.orgId,
    workerId: body.worker_id,
    machineId: body.machine_id,
    fields: {
      name: body.name,
      hostname: body.hostname ?? null,
      daemon_version: body.daemon_version ?? null,
      key_id: principal.keyId,
      max_concurrent_jobs: body.max_concurrent_jobs ?? 1,
      max_download_gb: body.max_download_gb ?? 0,
      shards: body.capabilities?.shards ?? false,
      loads: body.capabilities?.loads ?? false,
    },
    runtimes: body.runtimes.map((r) => ({
      engine: r.engine,
      base_url: r.base_url,
      status: r.status,
      capabilities: r.capabilities ?? null,
    })),
    gpus: (body.gpus ?? []).map((g) => ({
      vendor: g.vendor,
      name: g.name,
      vram_gb: g.vram_gb,
      driver: g.driver ?? null,
      cuda: g.cuda ?? null,
      gpu_index: g.index ?? null,
    })),
    models: [...models.values()],
    now: deps.clock.now(),
  })
  if ('notOwned' in registered) throw notOwned()
  const { worker, requeued, reused } = registered
  // What the worker hosts and whether it is online may differ now (docs/api.md §4 `available`).
  modelsChanged(deps, 'fleet')
  await afterRequeues(deps, requeued, 'worker_reregistered')
  log.info('worker registered', {
    worker_id: worker.id,
    org_id: worker.org_id,
    reregistered: reused,
    requeued: requeued.map((r) => r.batch_id),
  })
  return {
    worker_id: worker.id,
    org_id: worker.org_id,
    heartbeat_interval_seconds: heartbeatInterval(deps.config),
    heartbeat_timeout_seconds: deps.config.HEARTBEAT_TIMEOUT_SECONDS,
  }
}

/** After the commit of requeues (re-registration, removal): parts, metrics, waiting polls. */
async function afterRequeues(deps: Deps & PollState, requeued: RequeueOutcome[], reason: RequeueReason) {
  for (const r of requeued) {
    await removeParts(deps, r.parts)
    // docs/api.md §16: a shard copy whose other copy carries on was not requeued.
    if (r.backup) deps.metrics.shardBackups.inc({ outcome: r.backup })
    else deps.metrics.requeues.inc({ reason, outcome: r.status })
    // A batch validated again, or a shard left with one copy (a backup may be handed out again).
    if (r.status === 'validated') batchClaimable(deps, r.batch_id, r.model)
  }
}

// ---------------------------------------------------------------------------------------------
// DELETE /v1/orgs/{org_id}/workers/{worker_id} (the caller's role is checked by the route)

/**
 * docs/api.md §3: the worker's row goes, what it holds is requeued without counting an attempt, and
 * a daemon still running with its id is answered 404 and registers anew (docs/api.md §7).
 */
export async function removeWorker(
  deps: Deps & CatalogueState & PollState,
  orgId: string,
  workerId: string,
  audit: AuditContext,
) {
  const removed = await deps.store.fleet.removeWorker(orgId, workerId, deps.clock.now(), audit)
  if (!removed) throw notFound('worker_not_found', 'No such worker in this organization', 'worker_id')
  modelsChanged(deps, 'fleet')
  await afterRequeues(deps, removed.requeued, 'worker_removed')
  const requeued = [...new Set(removed.requeued.map((r) => r.batch_id))]
  log.info('worker removed', { worker_id: workerId, org_id: orgId, requeued })
  return { id: workerId, object: 'worker' as const, deleted: true as const, requeued }
}

// ---------------------------------------------------------------------------------------------
// POST /workers/{worker_id}/heartbeat

/** Identifies the child-row state a heartbeat asks for; an unchanged report rewrites nothing. */
function inventorySig(body: HeartbeatBody): string {
  const text = JSON.stringify([body.inventory ?? null, body.loaded_models ?? []])
  return Bun.hash(text).toString(36)
}

export async function heartbeat(
  deps: Deps & CatalogueState & PollState,
  principal: WorkerPrincipal,
  workerId: string,
  body: HeartbeatBody,
) {
  const row = await deps.store.fleet.heartbeat({
    workerId,
    orgId: principal.orgId,
    activity: body.activity,
    vram_total_gb: body.vram_total_gb ?? null,
    vram_available_gb: body.vram_available_gb ?? null,
    gpu_utilization: body.gpu_utilization ?? null,
    gpu_memory_used_gb: body.gpu_memory_used_gb ?? null,
    uptime_seconds: body.uptime_seconds ?? null,
    loaded_models: body.loaded_models ?? [],
    current_job_id: body.current_job_id ?? null,
    concurrency: body.concurrency ?? null,
    loading_models: body.loading_models ?? [],
    model_stats: body.model_stats ?? null,
    gpu_memory: body.gpus ?? null,
    model_gpus: body.model_gpus ?? [],
    // In the server's time: the daemon says how long it waits, not until when by its own clock.
    load_failures: (body.load_failures ?? []).map((f) => ({
      name: f.name,
      error: f.error,
      failures: f.failures,
      retry_at: deps.clock.now() + f.retry_in_seconds,
    })),
    now: deps.clock.now(),
    cutoff: onlineCutoff(deps),
  })
  if (!row) {
    await ownWorker(deps, principal, workerId) // 404 or 403
    throw notFound('worker_not_found', 'No such worker', 'worker_id')
  }
  // An unchanged report (the common heartbeat) leaves the child rows alone.
  const sig = inventorySig(body)
  if (sig !== row.inventory_sig) {
    // docs/api.md §7 heartbeat: the inventory is the full on-disk list, resent whole, so it replaces the
    // previous one; an older daemon that omits `inventory` keeps the last one.
    let inventory: HostedModelInput[] | undefined
    if (body.inventory !== undefined) {
      const merged = new Map<string, HostedModelInput>()
      mergeInventory(merged, body.inventory)
      inventory = [...merged.values()]
    }
    await deps.store.fleet.replaceInventory(workerId, inventory, body.loaded_models ?? [], sig)
    // docs/api.md §7 wait_seconds: a held poll of this worker looks again with what it now hosts.
    deps.pollWaiters.workerChanged(workerId)
  }
  // docs/api.md §4 `available`: a new inventory, or a worker back, heartbeating first or with another
  // VRAM total, may change which entries the fleet can serve. A steady heartbeat changes nothing.
  if (sig !== row.inventory_sig || row.fitChanged) modelsChanged(deps, 'fleet')
  const pull_models: PullItem[] =
    body.activity === 'idle' && row.max_download_gb > 0 ? await pullModelsFor(deps, workerId) : []
  return {
    status: 'online' as const,
    worker_id: workerId,
    next_heartbeat_in: heartbeatInterval(deps.config),
    assigned_job_ids: row.assigned,
    pull_models,
  }
}

// ---------------------------------------------------------------------------------------------
// POST /workers/progress, /workers/model-progress, /workers/report-failure

export async function progress(
  deps: Deps & CatalogueState & PollState,
  principal: WorkerPrincipal,
  body: ProgressBody,
) {
  await ownWorker(deps, principal, body.worker_id)
  await deps.store.fleet.recordProgress({
    workerId: body.worker_id,
    jobId: body.job_id,
    assignmentId: body.assignment_id,
    total: body.total_prompts,
    completed: body.completed_prompts,
    failed: body.failed_prompts,
    now: deps.clock.now(),
  })
  return { status: 'ok' as const }
}

export async function modelProgress(
  deps: Deps & CatalogueState & PollState,
  principal: WorkerPrincipal,
  body: ModelProgressBody,
) {
  const before = await ownWorker(deps, principal, body.worker_id)
  // docs/api.md §7 model-progress: the back-off of a finished download, before its ask ends.
  await settlePull(deps, body.worker_id, body)
  // docs/api.md §7: model-progress counts as liveness. A failed download ends the ask; a completed
  // one keeps it (as verifying) until the worker's inventory lists the model, so that neither its
  // next poll nor its next heartbeat, racing the report of its new inventory, asks for it again.
  await deps.store.fleet.recordModelProgress(
    body.worker_id,
    body.model,
    body.status === 'failed'
      ? null
      : {
          progress_status: body.status === 'downloading' ? 'downloading' : 'verifying',
          completed_bytes: body.completed_bytes ?? null,
          total_bytes: body.total_bytes ?? null,
        },
    deps.clock.now(),
  )
  // A silent worker's report brings it back online (docs/api.md §4 `available` may change).
  if (!isOnline(deps, before)) modelsChanged(deps, 'fleet')
  log.info('model download progress', {
    worker_id: body.worker_id,
    model: body.model,
    digest: digestOrNull(body.digest),
    status: body.status,
    completed_bytes: body.completed_bytes,
    total_bytes: body.total_bytes,
    ...(body.error ? { error: body.error } : {}),
    ...(body.cause ? { cause: body.cause } : {}),
  })
  return { status: 'ok' as const }
}

export async function reportFailure(
  deps: Deps & CatalogueState & PollState,
  principal: WorkerPrincipal,
  body: ReportFailureBody,
) {
  await ownWorker(deps, principal, body.worker_id)
  const outcome = await deps.store.queue.reportFailure({
    workerId: body.worker_id,
    jobId: body.job_id,
    assignmentId: body.assignment_id,
    error: body.error,
    now: deps.clock.now(),
  })
  // docs/api.md §16: a shard copy whose other copy carries on was not requeued.
  if (outcome.backup) deps.metrics.shardBackups.inc({ outcome: outcome.backup })
  else deps.metrics.requeues.inc({ reason: 'reported_failure', outcome: outcome.status })
  await removeParts(deps, outcome.parts)
  if (outcome.status === 'validated') batchClaimable(deps, outcome.batch_id, outcome.model)
  return {
    status: outcome.status,
    batch_id: outcome.batch_id,
    attempts: outcome.attempts,
    error: outcome.error,
  }
}
