import { and, asc, count, eq, gt, inArray, type SQL, sql } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { placeholders, preparedOnce } from '../../db/prepared'
import {
  batches,
  memberships,
  modelPullFailures,
  modelPulls,
  organizations,
  type WorkerRow,
  workerGpus,
  workerModels,
  workerRuntimes,
  workers,
} from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { workerRemoved } from '../../domain/audit'
import { inventoryPlan } from '../../domain/inventory-plan'
import { machineLookup, orgGone, registerPlan } from '../../domain/register-plan'
import { type RequeueOutcome, removedRequeue } from '../../domain/requeue'
import { isShardId } from '../../domain/shards'
import { checkHolder, checkProgress } from '../../domain/worker-rules'
import { grouped } from '../../lib/grouped'
import { newId } from '../../lib/ids'
import {
  type Beat,
  type BeatAnswer,
  type BeatRow,
  beatAnswer,
  type FleetStore,
  HEARTBEATS_PER_COMMIT,
  type ListedWorker,
  namedHosts,
  type Registration,
  type WorkerHosting,
} from '../fleet'
import { hostedModelColumns } from '../statements'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'
import { pageRows } from './page'
import { holdingOf, requeueHeldInTx } from './queue'
import { recordShardProgressInTx } from './shards'

// The fleet on SQLite: synchronous bodies on bun:sqlite, hot statements prepared once per
// database (heartbeat, poll's worker and hosting reads, pool capacity).

// The hottest statement of the protocol, kept as raw SQL on the driver: drizzle's per-call
// placeholder filling and row mapping cost a measurable share of the heartbeat (bench/heartbeat.ts).
// Ownership is in the WHERE: no row returned = unknown worker or another org's. RETURNING carries
// what the answer needs, the held batches, shards and backup copies included, so a heartbeat is one
// statement. A field the daemon leaves out keeps its last reported value (coalesce).
const beatSql = (steady: string) =>
  `UPDATE workers SET status = 'online', activity = $activity,
     vram_total_gb = coalesce($vram_total_gb, vram_total_gb),
     vram_available_gb = coalesce($vram_available_gb, vram_available_gb),
     gpu_utilization = coalesce($gpu_utilization, gpu_utilization),
     gpu_memory_used_gb = coalesce($gpu_memory_used_gb, gpu_memory_used_gb),
     uptime_seconds = coalesce($uptime_seconds, uptime_seconds),
     concurrency = coalesce($concurrency, concurrency),
     model_stats = coalesce($model_stats, model_stats), loading_models = $loading_models,
     gpu_memory = coalesce($gpu_memory, gpu_memory), model_gpus = $model_gpus,
     load_failures = $load_failures,
     loaded_models = $loaded_models, current_job_id = $current_job_id,
     last_heartbeat_at = $now, last_seen_at = $now
   WHERE id = $id AND org_id = $org_id ${steady}
   RETURNING inventory_sig, max_download_gb,
     (SELECT group_concat(job) FROM (
       SELECT batch_id AS job FROM batch_assignments WHERE worker_id = $id AND completed_at IS NULL
       UNION ALL SELECT id FROM batch_shards WHERE worker_id = $id AND status = 'running'
       UNION ALL SELECT id FROM batch_shards WHERE backup_worker_id = $id AND status = 'running')) AS assigned`

const stmts = preparedOnce((db: Db) => {
  const id = sql.placeholder('id')
  const online = and(eq(workers.status, 'online'), gt(workers.last_seen_at, sql.placeholder('cutoff')))
  return {
    beat: db.$client.prepare<BeatRow, [Record<string, string | number | null>]>(beatSql('')),
    // The same statement for a worker whose fit stays as it was (BeatAnswer.fitChanged): online,
    // heartbeated before, same VRAM total or none reported. Tried first: it is the common beat.
    steadyBeat: db.$client.prepare<BeatRow, [Record<string, string | number | null>]>(
      beatSql(`AND status = 'online' AND last_seen_at > $cutoff AND last_heartbeat_at IS NOT NULL
         AND ($vram_total_gb IS NULL OR vram_total_gb = $vram_total_gb)`),
    ),
    workerById: db.select().from(workers).where(eq(workers.id, id)).prepare(),
    setSig: db
      .update(workers)
      .set({ inventory_sig: sql.placeholder('sig') as never, hosting_seq: sql`${workers.hosting_seq} + 1` })
      .where(eq(workers.id, id))
      .prepare(),
    touch: db
      .update(workers)
      .set({ status: 'online', last_seen_at: sql.placeholder('now') as never })
      .where(eq(workers.id, id))
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
        ...placeholders(['name', 'runtime', 'digest', 'size_bytes', 'loaded'], { runtime_model_id: 'name' }),
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
        ...placeholders(['name'], { runtime_model_id: 'name' }),
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
    setCounts: db
      .update(batches)
      .set(
        placeholders([], {
          request_counts_completed: 'completed',
          request_counts_failed: 'failed',
          updated_at: 'now',
        }),
      )
      .where(and(eq(batches.id, sql.placeholder('job_id')), eq(batches.status, 'in_progress')))
      .prepare(),
    runtimes: db
      .select({ engine: workerRuntimes.engine, capabilities: workerRuntimes.capabilities })
      .from(workerRuntimes)
      .where(eq(workerRuntimes.worker_id, id))
      .prepare(),
    models: db
      .select(hostedModelColumns(workerModels))
      .from(workerModels)
      .where(eq(workerModels.worker_id, id))
      .prepare(),
    onlineWorkers: db
      .select({
        id: workers.id,
        org_id: workers.org_id,
        last_heartbeat_at: workers.last_heartbeat_at,
        vram_total_gb: workers.vram_total_gb,
        gpu_memory: workers.gpu_memory,
        last_seen_at: workers.last_seen_at,
      })
      .from(workers)
      .where(online)
      .prepare(),
    // docs/api.md §7 placement: the workers that load models, with the models of what each holds.
    placementFleet: db.$client.prepare<
      { id: string; loaded_models: string; loading_models: string; model_stats: string; held: string },
      { cutoff: number }
    >(
      `SELECT w.id, w.loaded_models, w.loading_models, w.model_stats,
         (SELECT json_group_array(b.model) FROM (
            SELECT batch_id FROM batch_assignments WHERE worker_id = w.id AND completed_at IS NULL
            UNION ALL
            SELECT batch_id FROM batch_shards WHERE worker_id = w.id AND status = 'running') h
          JOIN batches b ON b.id = h.batch_id WHERE b.model IS NOT NULL) AS held
       FROM workers w WHERE w.loads = 1 AND w.status = 'online' AND w.last_seen_at > $cutoff`,
    ),
    // Index-only on worker_models_name_idx (name, worker_id).
    hostsNamed: db
      .select({ worker_id: workerModels.worker_id })
      .from(workerModels)
      .where(eq(workerModels.name, sql.placeholder('name')))
      .prepare(),
    waiting: db
      .select({ id: batches.id })
      .from(batches)
      .where(and(eq(batches.status, 'validated'), eq(batches.model, sql.placeholder('model'))))
      .limit(1)
      .prepare(),
    pullOf: db
      .select({ pull: modelPulls, status: workers.status, last_seen_at: workers.last_seen_at })
      .from(modelPulls)
      .leftJoin(workers, eq(workers.id, modelPulls.worker_id))
      .where(eq(modelPulls.catalog_id, sql.placeholder('catalog_id')))
      .prepare(),
    pullsOfWorker: db
      .select()
      .from(modelPulls)
      .where(eq(modelPulls.worker_id, sql.placeholder('worker_id')))
      .prepare(),
    capacity: db
      .select({
        online: sql<number>`count(*)`,
        idle: sql<number>`coalesce(sum(${workers.activity} = 'idle'), 0)`,
        vram: sql<number>`coalesce(sum(${workers.vram_total_gb}), 0)`,
      })
      .from(workers)
      .where(online)
      .prepare(),
    gpus: db
      .select({ n: sql<number>`count(*)` })
      .from(workerGpus)
      .innerJoin(workers, eq(workers.id, workerGpus.worker_id))
      .where(online)
      .prepare(),
    orgsOf: db
      .select({ org_id: memberships.org_id })
      .from(memberships)
      .where(eq(memberships.user_id, sql.placeholder('user_id')))
      .prepare(),
  }
})

/** What the matching predicate reads of one worker besides its row (FleetStore.workerHosting). */
function hostingOf(deps: SqliteDeps, workerId: string): WorkerHosting {
  const s = stmts(deps)
  const engines: string[] = []
  const reported: WorkerHosting['reported'] = {}
  for (const r of s.runtimes.all({ id: workerId })) {
    engines.push(r.engine)
    if (r.capabilities) reported[r.engine] = r.capabilities
  }
  return { engines, reported, models: s.models.all({ id: workerId }) }
}

function insertChildren(tx: Tx, workerId: string, r: Registration) {
  if (r.runtimes.length) {
    tx.insert(workerRuntimes)
      .values(r.runtimes.map((x) => ({ ...x, worker_id: workerId })))
      .run()
  }
  if (r.gpus.length) {
    tx.insert(workerGpus)
      .values(r.gpus.map((g) => ({ ...g, worker_id: workerId })))
      .run()
  }
  const rows = r.models.map((m) => ({
    ...m,
    worker_id: workerId,
    runtime_model_id: m.name,
    advertised: true,
  }))
  // SQLite caps bound parameters per statement: insert in slices.
  for (let i = 0; i < rows.length; i += 200)
    tx.insert(workerModels)
      .values(rows.slice(i, i + 200))
      .run()
}

/** One heartbeat's statement: the steady form first, the full one when the worker's fit changed. */
function beat(s: ReturnType<typeof stmts>, b: Beat): BeatAnswer | null {
  const params = {
    id: b.workerId,
    org_id: b.orgId,
    activity: b.activity,
    vram_total_gb: b.vram_total_gb,
    vram_available_gb: b.vram_available_gb,
    gpu_utilization: b.gpu_utilization,
    gpu_memory_used_gb: b.gpu_memory_used_gb,
    uptime_seconds: b.uptime_seconds,
    concurrency: b.concurrency ?? null,
    model_stats: b.model_stats ? JSON.stringify(b.model_stats) : null,
    loading_models: JSON.stringify(b.loading_models ?? []),
    gpu_memory: b.gpu_memory ? JSON.stringify(b.gpu_memory) : null,
    model_gpus: JSON.stringify(b.model_gpus ?? []),
    load_failures: JSON.stringify(b.load_failures ?? []),
    loaded_models: JSON.stringify(b.loaded_models),
    current_job_id: b.current_job_id,
    now: b.now,
  }
  const steady = s.steadyBeat.get({ ...params, cutoff: b.cutoff })
  const row = steady ?? s.beat.get(params)
  return row ? beatAnswer(row, Boolean(steady)) : null
}

export function sqliteFleet(deps: SqliteDeps): FleetStore {
  const { db } = deps
  // HEARTBEATS_PER_COMMIT: one transaction appends the workers page to the WAL once for the group;
  // each beat is still its own guarded UPDATE with its own answer.
  const beats = grouped<Beat, BeatAnswer | null>(async (items) => {
    const s = stmts(deps)
    return writeTx(db, () => items.map((b) => beat(s, b)))
  }, HEARTBEATS_PER_COMMIT)
  return {
    async findWorker(id) {
      return stmts(deps).workerById.get({ id })
    },

    async register(r) {
      return writeTx(db, (tx) => {
        if (
          !tx.select({ id: organizations.id }).from(organizations).where(eq(organizations.id, r.orgId)).get()
        )
          throw orgGone()
        const byId = r.workerId
          ? tx.select().from(workers).where(eq(workers.id, r.workerId)).get()
          : undefined
        const machine = machineLookup(r, byId)
        const byMachine = machine
          ? tx
              .select()
              .from(workers)
              .where(and(eq(workers.org_id, machine.orgId), eq(workers.machine_id, machine.machineId)))
              .orderBy(sql`${workers.seq} desc`)
              .get()
          : undefined
        const plan = registerPlan(r, byId, byMachine)
        if (plan.kind === 'not_owned') return { notOwned: true as const }
        const requeued: RequeueOutcome[] = []
        let worker: WorkerRow
        if (plan.kind === 'reuse') {
          // docs/api.md §7: whatever the old incarnation held is requeued as a failed attempt.
          requeued.push(...requeueHeldInTx(deps, plan.workerId, plan.requeue, r.now))
          worker = tx
            .update(workers)
            .set({ ...plan.set, hosting_seq: sql`${workers.hosting_seq} + 1` })
            .where(eq(workers.id, plan.workerId))
            .returning()
            .get()
          tx.delete(workerRuntimes).where(eq(workerRuntimes.worker_id, worker.id)).run()
          tx.delete(workerGpus).where(eq(workerGpus.worker_id, worker.id)).run()
          tx.delete(workerModels).where(eq(workerModels.worker_id, worker.id)).run()
          tx.delete(modelPulls).where(eq(modelPulls.worker_id, worker.id)).run()
        } else {
          worker = tx
            .insert(workers)
            .values({ ...plan.values, id: newId('wrk_') })
            .returning()
            .get()
        }
        insertChildren(tx, worker.id, r)
        return { worker, requeued, reused: plan.kind === 'reuse' }
      })
    },

    async removeWorker(orgId, workerId, now, audit) {
      return writeTx(db, (tx) => {
        const worker = tx
          .select()
          .from(workers)
          .where(and(eq(workers.id, workerId), eq(workers.org_id, orgId)))
          .get()
        if (!worker) return undefined
        const requeued = requeueHeldInTx(deps, worker.id, removedRequeue(worker), now)
        // Its runtimes, GPUs, models, pull asks and back-offs go with it (ON DELETE CASCADE).
        tx.delete(workers).where(eq(workers.id, worker.id)).run()
        appendAudit(tx, audit, [workerRemoved(worker, [...new Set(requeued.map((r) => r.batch_id))])], now)
        return { worker, requeued }
      })
    },

    heartbeat: beats,

    async replaceInventory(workerId, inventory, loaded, sig) {
      const s = stmts(deps)
      const id = workerId
      const plan = inventoryPlan(inventory, loaded, sig)
      writeTx(db, () => {
        // Removed since its heartbeat was answered (docs/api.md §3): nothing of it is kept.
        if (!s.workerById.get({ id })) return
        for (const o of plan) {
          if (o.op === 'delete_unconfigured') s.deleteUnconfigured.run({ id })
          else if (o.op === 'reset_reported') s.resetConfigured.run({ id })
          else if (o.op === 'upsert_on_disk') {
            for (const m of o.models) {
              s.upsertOnDisk.run({
                id,
                name: m.name,
                runtime: m.runtime,
                digest: m.digest,
                size_bytes: m.size_bytes,
                loaded: m.loaded,
              })
            }
          } else if (o.op === 'clear_loaded') s.clearLoaded.run({ id })
          else if (o.op === 'upsert_loaded') for (const name of o.names) s.upsertLoaded.run({ id, name })
          else if (o.op === 'delete_orphans') s.deleteOrphans.run({ id })
          else s.setSig.run({ id, sig: o.sig })
        }
      })
    },

    async recordProgress(p) {
      const s = stmts(deps)
      writeTx(db, () => {
        if (isShardId(p.jobId)) {
          return recordShardProgressInTx(deps, p, (held) => checkProgress(held, p), p)
        }
        const held = checkHolder(holdingOf(deps, p.jobId), p.workerId, p.assignmentId)
        checkProgress(held, p)
        s.setCounts.run({ job_id: p.jobId, completed: p.completed, failed: p.failed, now: p.now })
      })
    },

    async recordModelProgress(workerId, model, progress, now) {
      writeTx(db, (tx) => {
        stmts(deps).touch.run({ id: workerId, now })
        const mine = and(
          eq(modelPulls.worker_id, workerId),
          sql`(${modelPulls.runtime_model_id} = ${model} or ${modelPulls.catalog_id} = ${model})`,
        )
        if (!progress) tx.delete(modelPulls).where(mine).run()
        else
          tx.update(modelPulls)
            .set({ last_progress_at: now, ...progress })
            .where(mine)
            .run()
      })
    },

    async listWorkers(orgId, page) {
      const where: SQL | undefined = orgId === null ? undefined : eq(workers.org_id, orgId)
      const { rows, has_more } = pageRows<WorkerRow>(db, workers, where, page)
      const ids = rows.map((w) => w.id)
      const group = <T extends { worker_id: string }>(list: T[]) => {
        const m = new Map<string, T[]>()
        for (const r of list) m.set(r.worker_id, [...(m.get(r.worker_id) ?? []), r])
        return m
      }
      const gpus = group(
        ids.length ? db.select().from(workerGpus).where(inArray(workerGpus.worker_id, ids)).all() : [],
      )
      const runtimes = group(
        ids.length
          ? db.select().from(workerRuntimes).where(inArray(workerRuntimes.worker_id, ids)).all()
          : [],
      )
      const models = group(
        ids.length ? db.select().from(workerModels).where(inArray(workerModels.worker_id, ids)).all() : [],
      )
      const pulls = group(
        ids.length ? db.select().from(modelPulls).where(inArray(modelPulls.worker_id, ids)).all() : [],
      )
      const failures = group(
        ids.length
          ? db.select().from(modelPullFailures).where(inArray(modelPullFailures.worker_id, ids)).all()
          : [],
      )
      const listed: ListedWorker[] = rows.map((w) => ({
        ...w,
        gpus: gpus.get(w.id) ?? [],
        runtimes: runtimes.get(w.id) ?? [],
        models: models.get(w.id) ?? [],
        pulls: pulls.get(w.id) ?? [],
        pull_failures: failures.get(w.id) ?? [],
      }))
      return { rows: listed, has_more }
    },

    async reportedInventory() {
      return {
        runtimes: db
          .select({ worker_id: workerRuntimes.worker_id, engine: workerRuntimes.engine })
          .from(workerRuntimes)
          .orderBy(asc(workerRuntimes.seq))
          .all(),
        models: db
          .select({
            worker_id: workerModels.worker_id,
            name: workerModels.name,
            runtime: workerModels.runtime,
            runtime_model_id: workerModels.runtime_model_id,
            digest: workerModels.digest,
            size_bytes: workerModels.size_bytes,
          })
          .from(workerModels)
          .orderBy(asc(workerModels.seq))
          .all(),
      }
    },

    async onlineWorkers(cutoff) {
      return stmts(deps).onlineWorkers.all({ cutoff })
    },
    async placementFleet(cutoff) {
      return stmts(deps)
        .placementFleet.all({ cutoff })
        .map((w) => ({
          id: w.id,
          loaded_models: JSON.parse(w.loaded_models),
          loading_models: JSON.parse(w.loading_models),
          model_stats: JSON.parse(w.model_stats),
          held: JSON.parse(w.held),
        }))
    },
    async hostsOf(names) {
      const s = stmts(deps)
      return new Map(names.map((name) => [name, s.hostsNamed.all({ name }).map((r) => r.worker_id)]))
    },
    async workerHosting(workerId) {
      return hostingOf(deps, workerId)
    },

    async findWorkerWithHosting(id, knownSeq) {
      const worker = stmts(deps).workerById.get({ id })
      if (!worker) return undefined
      return { worker, hosting: worker.hosting_seq === knownSeq ? null : hostingOf(deps, id) }
    },

    async hostsNamed(names) {
      if (names.length === 0) return []
      const heads = db
        .select({
          id: workers.id,
          org_id: workers.org_id,
          name: workers.name,
          status: workers.status,
          last_seen_at: workers.last_seen_at,
          last_heartbeat_at: workers.last_heartbeat_at,
          vram_total_gb: workers.vram_total_gb,
          gpu_memory: workers.gpu_memory,
          loading_models: workers.loading_models,
          load_failures: workers.load_failures,
          shards: workers.shards,
        })
        .from(workers)
        .where(
          inArray(
            workers.id,
            db
              .selectDistinct({ id: workerModels.worker_id })
              .from(workerModels)
              .where(inArray(workerModels.name, [...names])),
          ),
        )
        .orderBy(asc(workers.seq))
        .all()
      const ids = heads.map((w) => w.id)
      const engines = db
        .select({
          worker_id: workerRuntimes.worker_id,
          engine: workerRuntimes.engine,
          capabilities: workerRuntimes.capabilities,
        })
        .from(workerRuntimes)
        .where(inArray(workerRuntimes.worker_id, ids))
        .orderBy(asc(workerRuntimes.seq))
        .all()
      const models = db
        .select({ worker_id: workerModels.worker_id, ...hostedModelColumns(workerModels) })
        .from(workerModels)
        .where(inArray(workerModels.worker_id, ids))
        .orderBy(asc(workerModels.seq))
        .all()
      return namedHosts(heads, engines, models)
    },
    async pullsFor(catalogIds) {
      if (catalogIds.length === 0) return []
      return db
        .select({
          pull: modelPulls,
          worker: {
            name: workers.name,
            org_id: workers.org_id,
            status: workers.status,
            last_seen_at: workers.last_seen_at,
          },
        })
        .from(modelPulls)
        .innerJoin(workers, eq(workers.id, modelPulls.worker_id))
        .where(inArray(modelPulls.catalog_id, [...catalogIds]))
        .all()
    },

    async pullsOfWorker(workerId) {
      return stmts(deps).pullsOfWorker.all({ worker_id: workerId })
    },
    async currentPull(catalogId) {
      return stmts(deps).pullOf.get({ catalog_id: catalogId })
    },
    async dropPull(catalogId, workerId) {
      db.delete(modelPulls)
        .where(and(eq(modelPulls.catalog_id, catalogId), eq(modelPulls.worker_id, workerId)))
        .run()
    },
    async pullFailuresOfWorker(workerId) {
      return db.select().from(modelPullFailures).where(eq(modelPullFailures.worker_id, workerId)).all()
    },
    async pullFailuresFor(catalogIds) {
      if (catalogIds.length === 0) return []
      return db
        .select({ failure: modelPullFailures, worker: { name: workers.name, org_id: workers.org_id } })
        .from(modelPullFailures)
        .innerJoin(workers, eq(workers.id, modelPullFailures.worker_id))
        .where(inArray(modelPullFailures.catalog_id, [...catalogIds]))
        .all()
    },
    async setPullFailure(failure) {
      const { catalog_id, worker_id, ...rest } = failure
      db.insert(modelPullFailures)
        .values(failure)
        .onConflictDoUpdate({
          target: [modelPullFailures.catalog_id, modelPullFailures.worker_id],
          set: rest,
        })
        .run()
    },
    async clearPullFailure(catalogId, workerId) {
      db.delete(modelPullFailures)
        .where(and(eq(modelPullFailures.catalog_id, catalogId), eq(modelPullFailures.worker_id, workerId)))
        .run()
    },
    async hasValidatedBatch(models) {
      const s = stmts(deps)
      return models.some((model) => s.waiting.get({ model }))
    },
    async askPull(ask, replacing) {
      return writeTx(db, (tx) => {
        const again = tx.select().from(modelPulls).where(eq(modelPulls.catalog_id, ask.catalog_id)).get()
        if (again && again.asked_at !== replacing) return false // someone else just asked
        tx.delete(modelPulls).where(eq(modelPulls.catalog_id, ask.catalog_id)).run()
        tx.insert(modelPulls).values(ask).run()
        return true
      })
    },

    async capacityCounts(cutoff) {
      return stmts(deps).capacity.get({ cutoff })!
    },
    async gpusOnline(cutoff) {
      return stmts(deps).gpus.get({ cutoff })!.n
    },
    async orgIdsOf(userId) {
      return stmts(deps)
        .orgsOf.all({ user_id: userId })
        .map((m) => m.org_id)
    },
    // Both gauge queries walk an index (batches_status_model, one covering scan; workers is
    // small), never the table rows.
    async batchCounts() {
      return db.select({ status: batches.status, n: count() }).from(batches).groupBy(batches.status).all()
    },
    async workerCounts(cutoff) {
      const liveness = sql<
        'online' | 'offline'
      >`CASE WHEN ${workers.status} = 'online' AND ${workers.last_seen_at} > ${cutoff} THEN 'online' ELSE 'offline' END`
      return db
        .select({ status: liveness, activity: workers.activity, n: count() })
        .from(workers)
        .groupBy(liveness, workers.activity)
        .all()
    },
  }
}
