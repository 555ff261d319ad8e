import { and, eq, isNull, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import {
  batchAssignments,
  batches,
  modelPulls,
  type WorkerRow,
  workerGpus,
  workerModels,
  workerRuntimes,
  workers,
} from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { digestOrNull } from '../../lib/digest'
import { badRequest, forbidden, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import type { WorkerPrincipal } from '../auth/credentials'
import { matchingStatements } from './matching'
import type {
  HeartbeatBody,
  InventoryItem,
  ModelProgressBody,
  ProgressBody,
  RegisterBody,
  ReportFailureBody,
} from './model'
import { type PullItem, pullModelsFor } from './pulls'
import { type RequeueOutcome, requeueBatch } from './requeue'

// The worker protocol (SPEC §4 Workers, API.md §7): register, heartbeat, progress, model-progress
// and report-failure. Poll lives in claim.ts, upload-results in results.ts.

export const HEARTBEAT_INTERVAL_SECONDS = 30

function prepare(db: Deps['db']) {
  const id = sql.placeholder('id')
  return {
    // The hottest statement of the protocol, kept as raw SQL on the driver: drizzle's per-call
    // placeholder filling and row mapping cost a measurable share of the heartbeat (bench/heartbeat.ts).
    // Ownership is in the WHERE: no row returned = unknown worker or another org's. RETURNING
    // carries what the answer needs, the held batches included, so a heartbeat is one statement.
    // A field the daemon leaves out keeps its last reported value (coalesce).
    beat: db.$client.prepare<
      { inventory_sig: string | null; max_download_gb: number; assigned: string | null },
      [Record<string, string | number | null>]
    >(
      `UPDATE workers SET status = 'online', activity = $activity,
         vram_total_gb = coalesce($vram_total_gb, vram_total_gb),
         vram_available_gb = coalesce($vram_available_gb, vram_available_gb),
         gpu_utilization = coalesce($gpu_utilization, gpu_utilization),
         gpu_memory_used_gb = coalesce($gpu_memory_used_gb, gpu_memory_used_gb),
         uptime_seconds = coalesce($uptime_seconds, uptime_seconds),
         loaded_models = $loaded_models, current_job_id = $current_job_id,
         last_heartbeat_at = $now, last_seen_at = $now
       WHERE id = $id AND org_id = $org_id
       RETURNING inventory_sig, max_download_gb,
         (SELECT group_concat(batch_id) FROM batch_assignments
           WHERE worker_id = $id AND completed_at IS NULL) AS assigned`,
    ),
    setSig: db
      .update(workers)
      .set({ inventory_sig: sql.placeholder('sig') as never })
      .where(eq(workers.id, id))
      .prepare(),
    touch: db
      .update(workers)
      .set({ status: 'online', last_seen_at: sql.placeholder('now') as never })
      .where(eq(workers.id, id))
      .prepare(),
    activeAssignments: db
      .select({ batch_id: batchAssignments.batch_id })
      .from(batchAssignments)
      .where(and(eq(batchAssignments.worker_id, id), isNull(batchAssignments.completed_at)))
      .orderBy(batchAssignments.seq)
      .prepare(),
    deleteUnconfigured: db
      .delete(workerModels)
      .where(and(eq(workerModels.worker_id, id), eq(workerModels.configured, false)))
      .prepare(),
    resetConfigured: db
      .update(workerModels)
      .set({ on_disk: false, loaded: false, digest: null, size_bytes: null, runtime: null })
      .where(eq(workerModels.worker_id, id))
      .prepare(),
    clearLoaded: db
      .update(workerModels)
      .set({ loaded: false })
      .where(eq(workerModels.worker_id, id))
      .prepare(),
    upsertOnDisk: db
      .insert(workerModels)
      .values({
        worker_id: id as never,
        name: sql.placeholder('name') as never,
        runtime_model_id: sql.placeholder('name') as never,
        runtime: sql.placeholder('runtime') as never,
        digest: sql.placeholder('digest') as never,
        size_bytes: sql.placeholder('size_bytes') as never,
        loaded: sql.placeholder('loaded') as never,
        on_disk: true,
      })
      .onConflictDoUpdate({
        target: [workerModels.worker_id, workerModels.name],
        set: {
          runtime: sql`excluded.runtime`,
          digest: sql`excluded.digest`,
          size_bytes: sql`excluded.size_bytes`,
          loaded: sql`excluded.loaded`,
          on_disk: true,
        },
      })
      .prepare(),
    upsertLoaded: db
      .insert(workerModels)
      .values({
        worker_id: id as never,
        name: sql.placeholder('name') as never,
        runtime_model_id: sql.placeholder('name') as never,
        loaded: true,
      })
      .onConflictDoUpdate({ target: [workerModels.worker_id, workerModels.name], set: { loaded: true } })
      .prepare(),
    // A row nothing vouches for any more (not configured, not on disk, not loaded) is not hosted.
    deleteOrphans: db
      .delete(workerModels)
      .where(
        and(
          eq(workerModels.worker_id, id),
          eq(workerModels.configured, false),
          eq(workerModels.on_disk, false),
          eq(workerModels.loaded, false),
        ),
      )
      .prepare(),
    // The batch a worker says it works on, with its current assignment (if any).
    holding: db
      .select({
        status: batches.status,
        total: batches.request_counts_total,
        completed: batches.request_counts_completed,
        failed: batches.request_counts_failed,
        assignment_id: batchAssignments.id,
        holder: batchAssignments.worker_id,
        assignment_completed_at: batchAssignments.completed_at,
      })
      .from(batches)
      .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
      .where(eq(batches.id, sql.placeholder('job_id')))
      .prepare(),
    setCounts: db
      .update(batches)
      .set({
        request_counts_completed: sql.placeholder('completed') as never,
        request_counts_failed: sql.placeholder('failed') as never,
        updated_at: sql.placeholder('now') as never,
      })
      .where(and(eq(batches.id, sql.placeholder('job_id')), eq(batches.status, 'in_progress')))
      .prepare(),
  }
}
export const workerStatements = preparedOnce(prepare)

/** The worker, if it belongs to the key's org: unknown → 404, another org's → 403 (SPEC §4). */
export function ownWorker(deps: Deps, principal: WorkerPrincipal, workerId: string): WorkerRow {
  const w = matchingStatements(deps).workerById.get({ id: workerId })
  if (!w) throw notFound('worker_not_found', 'No such worker', 'worker_id')
  if (w.org_id !== principal.orgId)
    throw forbidden('worker_not_owned', "This worker does not belong to the key's organization")
  return w
}

/**
 * SPEC §4: progress, results and failures come only from the worker the batch is assigned to, and
 * (API.md §7 fencing) from its current assignment when the run names one. Anything else is a 403 —
 * also for an unknown batch, so a key learns nothing about batches it does not hold.
 */
export function requireHolder(deps: Deps, workerId: string, jobId: string, assignmentId: string | undefined) {
  const row = workerStatements(deps).holding.get({ job_id: jobId })
  if (
    row?.status !== 'in_progress' ||
    row.holder !== workerId ||
    row.assignment_completed_at !== null ||
    row.assignment_id === null
  ) {
    throw forbidden('not_assigned', 'This batch is not assigned to this worker')
  }
  if (assignmentId !== undefined && assignmentId !== row.assignment_id) {
    throw forbidden('stale_assignment', 'This assignment is no longer current; stop the job')
  }
  return { ...row, assignment_id: row.assignment_id }
}

// ---------------------------------------------------------------------------------------------
// POST /workers/register

interface ModelRowInput {
  name: string
  runtime: string | null
  digest: string | null
  size_bytes: number | null
  loaded: boolean
  configured: boolean
  on_disk: boolean
}

function mergeInventory(rows: Map<string, ModelRowInput>, items: InventoryItem[]) {
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

export function register(deps: Deps, principal: WorkerPrincipal, body: RegisterBody) {
  const engines = body.runtimes.map((r) => r.engine)
  const duplicate = engines.find((e, i) => engines.indexOf(e) !== i)
  if (duplicate)
    throw badRequest('duplicate_runtime', `Runtime engine '${duplicate}' is listed twice`, 'runtimes')

  // Everything known at registration is "advertised" (SPEC Poll rule 6): the configured names and
  // whatever the runtimes hold (SPEC: a worker advertises everything its runtimes hold).
  const models = new Map<string, ModelRowInput>()
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

  const now = deps.clock.now()
  const fields = {
    name: body.name,
    hostname: body.hostname ?? null,
    daemon_version: body.daemon_version ?? null,
    key_id: principal.keyId,
    max_concurrent_jobs: body.max_concurrent_jobs ?? 1,
    max_download_gb: body.max_download_gb ?? 0,
    // Online and never-heartbeated: VRAM and activity come with the first heartbeat.
    status: 'online' as const,
    activity: 'idle' as const,
    vram_total_gb: null,
    vram_available_gb: null,
    gpu_utilization: null,
    gpu_memory_used_gb: null,
    loaded_models: [],
    inventory_sig: null,
    current_job_id: null,
    uptime_seconds: null,
    last_heartbeat_at: null,
    last_seen_at: now,
  }

  const { worker, requeued, reused } = writeTx(deps.db, (tx) => {
    let existing: WorkerRow | undefined
    if (body.worker_id) {
      existing = tx.select().from(workers).where(eq(workers.id, body.worker_id)).get()
      if (existing && existing.org_id !== principal.orgId)
        throw forbidden('worker_not_owned', "This worker does not belong to the key's organization")
    }
    if (!existing && body.machine_id) {
      existing = tx
        .select()
        .from(workers)
        .where(and(eq(workers.org_id, principal.orgId), eq(workers.machine_id, body.machine_id)))
        .orderBy(sql`${workers.seq} desc`)
        .get()
    }
    const requeued: RequeueOutcome[] = []
    let worker: WorkerRow
    if (existing) {
      // API.md §7: whatever the old incarnation held is requeued as a failed attempt.
      for (const a of workerStatements(deps).activeAssignments.all({ id: existing.id })) {
        const outcome = requeueBatch(tx, deps, a.batch_id, 'worker_reregistered', 'worker re-registered', now)
        if (outcome) requeued.push(outcome)
      }
      worker = tx
        .update(workers)
        .set({ ...fields, machine_id: body.machine_id ?? existing.machine_id })
        .where(eq(workers.id, existing.id))
        .returning()
        .get()
      tx.delete(workerRuntimes).where(eq(workerRuntimes.worker_id, worker.id)).run()
      tx.delete(workerGpus).where(eq(workerGpus.worker_id, worker.id)).run()
      tx.delete(workerModels).where(eq(workerModels.worker_id, worker.id)).run()
      tx.delete(modelPulls).where(eq(modelPulls.worker_id, worker.id)).run()
    } else {
      worker = tx
        .insert(workers)
        .values({
          ...fields,
          id: newId('wrk_'),
          org_id: principal.orgId,
          machine_id: body.machine_id ?? null,
          registered_at: now,
        })
        .returning()
        .get()
    }
    insertChildren(tx, worker.id, body, models)
    return { worker, requeued, reused: existing !== undefined }
  })
  log.info('worker registered', {
    worker_id: worker.id,
    org_id: worker.org_id,
    reregistered: reused,
    requeued: requeued.map((r) => r.batch_id),
  })
  return {
    worker_id: worker.id,
    org_id: worker.org_id,
    heartbeat_interval_seconds: HEARTBEAT_INTERVAL_SECONDS,
    heartbeat_timeout_seconds: deps.config.HEARTBEAT_TIMEOUT_SECONDS,
  }
}

function insertChildren(tx: Tx, workerId: string, body: RegisterBody, models: Map<string, ModelRowInput>) {
  if (body.runtimes.length) {
    tx.insert(workerRuntimes)
      .values(
        body.runtimes.map((r) => ({
          worker_id: workerId,
          engine: r.engine,
          base_url: r.base_url,
          status: r.status,
        })),
      )
      .run()
  }
  if (body.gpus?.length) {
    tx.insert(workerGpus)
      .values(
        body.gpus.map((g) => ({
          worker_id: workerId,
          vendor: g.vendor,
          name: g.name,
          vram_gb: g.vram_gb,
          driver: g.driver ?? null,
          cuda: g.cuda ?? null,
        })),
      )
      .run()
  }
  const rows = [...models.values()].map((m) => ({
    worker_id: workerId,
    name: m.name,
    runtime_model_id: m.name,
    runtime: m.runtime,
    digest: m.digest,
    size_bytes: m.size_bytes,
    loaded: m.loaded,
    configured: m.configured,
    on_disk: m.on_disk,
    advertised: true,
  }))
  // SQLite caps bound parameters per statement: insert in slices.
  for (let i = 0; i < rows.length; i += 200)
    tx.insert(workerModels)
      .values(rows.slice(i, i + 200))
      .run()
}

// ---------------------------------------------------------------------------------------------
// POST /workers/{worker_id}/heartbeat

/** Identifies the child-row state a heartbeat asks for; an unchanged report rewrites nothing. */
function inventorySig(body: HeartbeatBody): string {
  const text = JSON.stringify([body.inventory ?? null, body.loaded_models ?? []])
  return Bun.hash(text).toString(36)
}

export function heartbeat(deps: Deps, principal: WorkerPrincipal, workerId: string, body: HeartbeatBody) {
  const s = workerStatements(deps)
  const row = s.beat.get({
    id: workerId,
    org_id: principal.orgId,
    activity: body.activity,
    vram_total_gb: body.vram_total_gb ?? null,
    vram_available_gb: body.vram_available_gb ?? null,
    gpu_utilization: body.gpu_utilization ?? null,
    gpu_memory_used_gb: body.gpu_memory_used_gb ?? null,
    uptime_seconds: body.uptime_seconds ?? null,
    loaded_models: JSON.stringify(body.loaded_models ?? []),
    current_job_id: body.current_job_id ?? null,
    now: deps.clock.now(),
  })
  if (!row) {
    ownWorker(deps, principal, workerId) // 404 or 403
    throw notFound('worker_not_found', 'No such worker', 'worker_id')
  }
  // An unchanged report (the common heartbeat) leaves the child rows alone.
  const sig = inventorySig(body)
  if (sig !== row.inventory_sig) {
    writeTx(deps.db, () => {
      replaceInventory(deps, workerId, body)
      s.setSig.run({ id: workerId, sig })
    })
    // API.md §7 wait_seconds: a held poll of this worker looks again with what it now hosts.
    deps.pollWaiters.workerChanged(workerId)
  }
  const pull_models: PullItem[] =
    body.activity === 'idle' && row.max_download_gb > 0 ? pullModelsFor(deps, workerId) : []
  return {
    status: 'online' as const,
    worker_id: workerId,
    next_heartbeat_in: HEARTBEAT_INTERVAL_SECONDS,
    assigned_job_ids: row.assigned ? row.assigned.split(',') : [],
    pull_models,
  }
}

/**
 * SPEC §4 heartbeat: the inventory is the full on-disk list, resent whole, so it replaces the
 * previous one; names configured at registration stay hosted. An older daemon that omits
 * `inventory` keeps the last one and only updates loaded flags.
 */
function replaceInventory(deps: Deps, workerId: string, body: HeartbeatBody) {
  const s = workerStatements(deps)
  const id = workerId
  if (body.inventory !== undefined) {
    s.deleteUnconfigured.run({ id })
    s.resetConfigured.run({ id })
    const merged = new Map<string, ModelRowInput>()
    mergeInventory(merged, body.inventory)
    for (const m of merged.values()) {
      s.upsertOnDisk.run({
        id,
        name: m.name,
        runtime: m.runtime,
        digest: m.digest,
        size_bytes: m.size_bytes,
        loaded: m.loaded,
      })
    }
  } else {
    s.clearLoaded.run({ id })
  }
  for (const name of new Set(body.loaded_models ?? [])) s.upsertLoaded.run({ id, name })
  s.deleteOrphans.run({ id })
}

// ---------------------------------------------------------------------------------------------
// POST /workers/progress, /workers/model-progress, /workers/report-failure

export function progress(deps: Deps, principal: WorkerPrincipal, body: ProgressBody) {
  ownWorker(deps, principal, body.worker_id)
  writeTx(deps.db, () => {
    const held = requireHolder(deps, body.worker_id, body.job_id, body.assignment_id)
    if (body.total_prompts !== undefined && body.total_prompts !== held.total) {
      throw badRequest(
        'total_mismatch',
        `total_prompts is ${body.total_prompts} but the batch has ${held.total} requests`,
        'total_prompts',
      )
    }
    if (body.completed_prompts < held.completed || body.failed_prompts < held.failed) {
      throw badRequest('counts_decreased', 'Progress counts never go down', 'completed_prompts')
    }
    if (body.completed_prompts + body.failed_prompts > held.total) {
      throw badRequest(
        'counts_exceed_total',
        `completed_prompts + failed_prompts exceeds the batch total of ${held.total}`,
        'completed_prompts',
      )
    }
    workerStatements(deps).setCounts.run({
      job_id: body.job_id,
      completed: body.completed_prompts,
      failed: body.failed_prompts,
      now: deps.clock.now(),
    })
  })
  return { status: 'ok' as const }
}

export function modelProgress(deps: Deps, principal: WorkerPrincipal, body: ModelProgressBody) {
  ownWorker(deps, principal, body.worker_id)
  const now = deps.clock.now()
  writeTx(deps.db, (tx) => {
    // API.md §7: model-progress counts as liveness.
    workerStatements(deps).touch.run({ id: body.worker_id, now })
    const mine = and(
      eq(modelPulls.worker_id, body.worker_id),
      sql`(${modelPulls.runtime_model_id} = ${body.model} or ${modelPulls.catalog_id} = ${body.model})`,
    )
    if (body.status === 'completed' || body.status === 'failed') tx.delete(modelPulls).where(mine).run()
    else tx.update(modelPulls).set({ last_progress_at: now }).where(mine).run()
  })
  log.info('model download progress', {
    worker_id: body.worker_id,
    model: body.model,
    digest: digestOrNull(body.digest),
    status: body.status,
    completed_bytes: body.completed_bytes,
    total_bytes: body.total_bytes,
  })
  return { status: 'ok' as const }
}

export function reportFailure(deps: Deps, principal: WorkerPrincipal, body: ReportFailureBody) {
  ownWorker(deps, principal, body.worker_id)
  const outcome = writeTx(deps.db, (tx) => {
    requireHolder(deps, body.worker_id, body.job_id, body.assignment_id)
    return requeueBatch(tx, deps, body.job_id, 'reported_failure', body.error, deps.clock.now())
  })
  // requireHolder saw the batch in_progress inside this transaction, so the requeue happened.
  if (!outcome) throw forbidden('not_assigned', 'This batch is not assigned to this worker')
  return outcome
}
