import type { SQL as Driver } from 'bun'
import { and, asc, count, desc, eq, gt, inArray, or, sql } from 'drizzle-orm'
import type { Config } from '../../config'
import * as schema from '../../db/pg/schema'
import type { WorkerRow } from '../../db/schema'
import { workerRemoved } from '../../domain/audit'
import { inventoryPlan } from '../../domain/inventory-plan'
import { machineLookup, orgGone, registerPlan } from '../../domain/register-plan'
import { type RequeueCause, type RequeueOutcome, removedRequeue } from '../../domain/requeue'
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
  type NewPull,
  namedHosts,
  type Registered,
  type Registration,
  type WorkerHosting,
} from '../fleet'
import type { WaitingHead } from '../queue'
import { hostedModelColumns, runningAssignment } from '../statements'
import { appendAudit } from './audit'
import { type PgDb, type PgTx, pipelined } from './db'
import { isForeignKeyViolation } from './errors'
import { pageRows } from './page'
import { headsCte, lockHolding, requeueLocked } from './queue'
import { recordShardProgress, requeueHeldShards } from './shards'

// The fleet on PostgreSQL, where several instances share one database. A read-then-write that
// must not race locks its rows first (FOR UPDATE) or is one conditional statement; the heartbeat is
// one UPDATE … RETURNING, held batches included (beatStatement).

const {
  batches,
  batchAssignments,
  memberships,
  modelPullFailures,
  modelPulls,
  workerGpus,
  workerModels,
  workerRuntimes,
  workers,
} = schema

const online = (cutoff: number) => and(eq(workers.status, 'online'), gt(workers.last_seen_at, cutoff))

/**
 * The heartbeat's UPDATE, written on the driver: drizzle built this statement anew at every beat,
 * which cost more than running it (bench/heartbeat.ts --postgres). Ownership is in the WHERE: no
 * row = unknown worker or another org's. A field the daemon leaves out keeps its last reported
 * value (coalesce). RETURNING carries the held batches, shards and backup copies (docs/api.md §16).
 * The steady form is the common beat, tried first: the worker's fit stays as it was
 * (BeatAnswer.fitChanged): online, heartbeated before, same VRAM total or none reported.
 */
const beatSql = (steady: string) =>
  `UPDATE workers SET status = 'online', activity = $1,
     vram_total_gb = coalesce($2::float8, vram_total_gb),
     vram_available_gb = coalesce($3::float8, vram_available_gb),
     gpu_utilization = coalesce($4::float8, gpu_utilization),
     gpu_memory_used_gb = coalesce($5::float8, gpu_memory_used_gb),
     uptime_seconds = coalesce($6::int, uptime_seconds),
     concurrency = coalesce($12::int, concurrency),
     model_stats = coalesce($13::text::jsonb, model_stats), loading_models = $14::text::jsonb,
     gpu_memory = coalesce($15::text::jsonb, gpu_memory), model_gpus = $16::text::jsonb,
     load_failures = $17::text::jsonb,
     loaded_models = $7::text::jsonb, current_job_id = $8, last_heartbeat_at = $9, last_seen_at = $9
   WHERE id = $10 AND org_id = $11 ${steady}
   RETURNING inventory_sig, max_download_gb,
     (SELECT string_agg(job, ',' ORDER BY kind, seq) FROM (
       SELECT batch_id AS job, 0 AS kind, seq FROM batch_assignments
       WHERE worker_id = $10 AND completed_at IS NULL
       UNION ALL
       SELECT id, 1, seq FROM batch_shards WHERE worker_id = $10 AND status = 'running'
       UNION ALL
       SELECT id, 2, seq FROM batch_shards WHERE backup_worker_id = $10 AND status = 'running') held) AS assigned`
const BEAT = beatSql('')
const STEADY_BEAT = beatSql(`AND status = 'online' AND last_seen_at > $18 AND last_heartbeat_at IS NOT NULL
     AND ($2::float8 IS NULL OR vram_total_gb = $2::float8)`)

function beatStatement(q: Driver, b: Beat, steady: boolean): Promise<BeatRow[]> {
  const params = [
    b.activity,
    b.vram_total_gb,
    b.vram_available_gb,
    b.gpu_utilization,
    b.gpu_memory_used_gb,
    b.uptime_seconds,
    JSON.stringify(b.loaded_models),
    b.current_job_id,
    b.now,
    b.workerId,
    b.orgId,
    b.concurrency ?? null,
    b.model_stats ? JSON.stringify(b.model_stats) : null,
    JSON.stringify(b.loading_models ?? []),
    b.gpu_memory ? JSON.stringify(b.gpu_memory) : null,
    JSON.stringify(b.model_gpus ?? []),
    JSON.stringify(b.load_failures ?? []),
  ]
  return (steady ? q.unsafe(STEADY_BEAT, [...params, b.cutoff]) : q.unsafe(BEAT, params)) as Promise<
    BeatRow[]
  >
}

/** A beat whose steady form found no row: the full form (fit changed, or not the caller's worker). */
async function changedBeat(q: Driver, b: Beat): Promise<BeatAnswer | null> {
  const [row] = await beatStatement(q, b, false)
  return row ? beatAnswer(row, false) : null
}

/**
 * Heartbeats that arrive together (lib/grouped.ts) go out in one round trip and one commit: BEGIN,
 * each beat's steady statement, COMMIT, pipelined on one connection. In worker order, so two
 * instances' groups lock shared rows in the same order and never deadlock (a stable sort: one
 * worker's beats keep their order). A beat alone is one autocommit statement.
 */
async function beatGroup(db: PgDb, items: Beat[]): Promise<(BeatAnswer | null)[]> {
  let steady: (BeatRow | undefined)[]
  if (items.length === 1) {
    steady = await beatStatement(db.$client, items[0]!, true)
  } else {
    const id = (i: number) => items[i]!.workerId
    const order = items.map((_, i) => i).sort((a, b) => (id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0))
    const conn = await db.$client.reserve()
    try {
      const sent = await pipelined(conn, [
        conn`BEGIN`,
        ...order.map((i) => beatStatement(conn, items[i]!, true)),
        conn`COMMIT`,
      ])
      steady = []
      for (const [k, i] of order.entries()) steady[i] = (sent[k + 1] as BeatRow[])[0]
    } finally {
      conn.release()
    }
  }
  // The rare beats whose fit changed follow in the order they came; a later beat of the same worker
  // that the group already wrote is written again after them, so the last report is the one kept.
  const answers: (BeatAnswer | null)[] = []
  const rewritten = new Set<string>()
  for (const [i, b] of items.entries()) {
    const row = steady[i]
    if (!row) {
      answers.push(await changedBeat(db.$client, b))
      rewritten.add(b.workerId)
      continue
    }
    if (rewritten.has(b.workerId)) await beatStatement(db.$client, b, false)
    answers.push(beatAnswer(row, true))
  }
  return answers
}

async function insertChildren(tx: PgTx, workerId: string, r: Registration) {
  if (r.runtimes.length)
    await tx.insert(workerRuntimes).values(r.runtimes.map((x) => ({ ...x, worker_id: workerId })))
  if (r.gpus.length) await tx.insert(workerGpus).values(r.gpus.map((g) => ({ ...g, worker_id: workerId })))
  const rows = r.models.map((m) => ({
    ...m,
    worker_id: workerId,
    runtime_model_id: m.name,
    advertised: true,
  }))
  // PostgreSQL caps bound parameters per statement (65,535): insert in slices.
  for (let i = 0; i < rows.length; i += 1000) await tx.insert(workerModels).values(rows.slice(i, i + 1000))
}

/**
 * Requeues every batch and shard copy `workerId` holds, its row locked by the caller
 * (re-registration, removal): the batches locked in claim order, then each shard (requeueHeldShards).
 */
async function requeueAllHeld(
  tx: PgTx,
  maxAttempts: number,
  workerId: string,
  cause: RequeueCause,
  now: number,
): Promise<RequeueOutcome[]> {
  const requeued: RequeueOutcome[] = []
  const held = await tx
    .select({
      id: batches.id,
      attempts: batches.attempts,
      request_counts_total: batches.request_counts_total,
      model: batches.model,
    })
    .from(batchAssignments)
    .innerJoin(batches, eq(batches.id, batchAssignments.batch_id))
    .where(and(eq(batchAssignments.worker_id, workerId), runningAssignment(batchAssignments, batches)))
    .orderBy(asc(batchAssignments.seq))
    .for('update', { of: batches })
  for (const b of held) {
    const outcome = await requeueLocked(tx, maxAttempts, b, cause, now)
    if (outcome) requeued.push(outcome)
  }
  // docs/api.md §16: and each shard it held, as that shard's attempt.
  requeued.push(...(await requeueHeldShards(tx, maxAttempts, workerId, cause, now)))
  return requeued
}

export function postgresFleet(db: PgDb, config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>): FleetStore {
  const maxAttempts = config.MAX_BATCH_ATTEMPTS
  const beats = grouped((items: Beat[]) => beatGroup(db, items), HEARTBEATS_PER_COMMIT)
  const registerTx = (r: Registration) =>
    db.transaction(async (tx): Promise<Registered> => {
      // The worker row is locked first, as a claim locks it: a poll of the old incarnation
      // either finished before (its batch is requeued below) or waits and sees the new one.
      let byId: WorkerRow | undefined
      if (r.workerId) {
        ;[byId] = (await tx
          .select()
          .from(workers)
          .where(eq(workers.id, r.workerId))
          .for('update')) as WorkerRow[]
      }
      const machine = machineLookup(r, byId)
      let byMachine: WorkerRow | undefined
      if (machine) {
        // Two first registrations of one machine at once (two instances) must make one worker,
        // as SQLite's single writer does: they take turns on a lock named by org and machine.
        await tx.execute(
          sql`SELECT pg_advisory_xact_lock(hashtextextended(${`${machine.orgId}\n${machine.machineId}`}, 0))`,
        )
        ;[byMachine] = (await tx
          .select()
          .from(workers)
          .where(and(eq(workers.org_id, machine.orgId), eq(workers.machine_id, machine.machineId)))
          .orderBy(desc(workers.seq))
          .limit(1)
          .for('update')) as WorkerRow[]
      }
      const plan = registerPlan(r, byId, byMachine)
      if (plan.kind === 'not_owned') return { notOwned: true as const }
      const requeued: RequeueOutcome[] = []
      let worker: WorkerRow
      if (plan.kind === 'reuse') {
        // docs/api.md §7: whatever the old incarnation held is requeued as a failed attempt.
        requeued.push(...(await requeueAllHeld(tx, maxAttempts, plan.workerId, plan.requeue, r.now)))
        ;[worker] = (await tx
          .update(workers)
          .set({ ...plan.set, hosting_seq: sql`${workers.hosting_seq} + 1` })
          .where(eq(workers.id, plan.workerId))
          .returning()) as WorkerRow[]
        await tx.delete(workerRuntimes).where(eq(workerRuntimes.worker_id, plan.workerId))
        await tx.delete(workerGpus).where(eq(workerGpus.worker_id, plan.workerId))
        await tx.delete(workerModels).where(eq(workerModels.worker_id, plan.workerId))
        await tx.delete(modelPulls).where(eq(modelPulls.worker_id, plan.workerId))
      } else {
        ;[worker] = (await tx
          .insert(workers)
          .values({ ...plan.values, id: newId('wrk_') })
          .returning()) as WorkerRow[]
      }
      await insertChildren(tx, worker!.id, r)
      return { worker: worker!, requeued, reused: plan.kind === 'reuse' }
    })
  return {
    async findWorker(id) {
      const [w] = await db.select().from(workers).where(eq(workers.id, id))
      return w as WorkerRow | undefined
    },

    async register(r) {
      return registerTx(r).catch((error) => {
        // The org was deleted meanwhile (its FOR UPDATE held the insert until it committed).
        if (isForeignKeyViolation(error)) throw orgGone()
        throw error
      })
    },

    async removeWorker(orgId, workerId, now, audit) {
      return db.transaction(async (tx) => {
        // Locked first, as a claim locks it (FOR KEY SHARE): a claim either committed before (its
        // batch is requeued below) or waits and finds no worker.
        const [worker] = (await tx
          .select()
          .from(workers)
          .where(and(eq(workers.id, workerId), eq(workers.org_id, orgId)))
          .for('update')) as WorkerRow[]
        if (!worker) return undefined
        const requeued = await requeueAllHeld(tx, maxAttempts, worker.id, removedRequeue(worker), now)
        // Its runtimes, GPUs, models, pull asks and back-offs go with it (ON DELETE CASCADE).
        await tx.delete(workers).where(eq(workers.id, worker.id))
        await appendAudit(
          tx,
          audit,
          [workerRemoved(worker, [...new Set(requeued.map((r) => r.batch_id))])],
          now,
        )
        return { worker, requeued }
      })
    },

    heartbeat: beats,

    async replaceInventory(workerId, inventory, loaded, sig) {
      const mine = eq(workerModels.worker_id, workerId)
      const plan = inventoryPlan(inventory, loaded, sig)
      await db.transaction(async (tx) => {
        // One worker's reports replace its rows one after the other (no interleaved upserts).
        const [found] = await tx
          .select({ id: workers.id })
          .from(workers)
          .where(eq(workers.id, workerId))
          .for('update')
        // Removed since its heartbeat was answered (docs/api.md §3): nothing of it is kept.
        if (!found) return
        for (const o of plan) {
          if (o.op === 'delete_unconfigured') {
            await tx.delete(workerModels).where(and(mine, eq(workerModels.configured, false)))
          } else if (o.op === 'reset_reported') {
            await tx
              .update(workerModels)
              .set({ on_disk: false, loaded: false, digest: null, size_bytes: null, runtime: null })
              .where(mine)
          } else if (o.op === 'upsert_on_disk') {
            await tx
              .insert(workerModels)
              .values(
                o.models.map((m) => ({
                  worker_id: workerId,
                  name: m.name,
                  runtime_model_id: m.name,
                  runtime: m.runtime,
                  digest: m.digest,
                  size_bytes: m.size_bytes,
                  loaded: m.loaded,
                  on_disk: true,
                })),
              )
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
          } else if (o.op === 'clear_loaded') {
            await tx.update(workerModels).set({ loaded: false }).where(mine)
          } else if (o.op === 'upsert_loaded') {
            await tx
              .insert(workerModels)
              .values(
                o.names.map((name) => ({ worker_id: workerId, name, runtime_model_id: name, loaded: true })),
              )
              .onConflictDoUpdate({
                target: [workerModels.worker_id, workerModels.name],
                set: { loaded: true },
              })
          } else if (o.op === 'delete_orphans') {
            await tx
              .delete(workerModels)
              .where(
                and(
                  mine,
                  eq(workerModels.configured, false),
                  eq(workerModels.on_disk, false),
                  eq(workerModels.loaded, false),
                ),
              )
          } else {
            await tx
              .update(workers)
              .set({ inventory_sig: o.sig, hosting_seq: sql`${workers.hosting_seq} + 1` })
              .where(eq(workers.id, workerId))
          }
        }
      })
    },

    async recordProgress(p) {
      await db.transaction(async (tx) => {
        if (isShardId(p.jobId)) return recordShardProgress(tx, p, (held) => checkProgress(held, p))
        checkProgress(checkHolder(await lockHolding(tx, p.jobId), p.workerId, p.assignmentId), p)
        await tx
          .update(batches)
          .set({ request_counts_completed: p.completed, request_counts_failed: p.failed, updated_at: p.now })
          .where(and(eq(batches.id, p.jobId), eq(batches.status, 'in_progress')))
      })
    },

    async recordModelProgress(workerId, model, progress, now) {
      await db.transaction(async (tx) => {
        await tx.update(workers).set({ status: 'online', last_seen_at: now }).where(eq(workers.id, workerId))
        const mine = and(
          eq(modelPulls.worker_id, workerId),
          or(eq(modelPulls.runtime_model_id, model), eq(modelPulls.catalog_id, model)),
        )
        if (!progress) await tx.delete(modelPulls).where(mine)
        else
          await tx
            .update(modelPulls)
            .set({ last_progress_at: now, ...progress })
            .where(mine)
      })
    },

    async listWorkers(orgId, page) {
      // docs/api.md §0 lists: newest first by seq; the cursor is resolved inside the same filter.
      const scope = orgId === null ? undefined : eq(workers.org_id, orgId)
      const { rows, has_more } = await pageRows<WorkerRow>(db, workers, scope, page)
      const ids = rows.map((w) => w.id)
      const [gpus, runtimes, models, pulls, failures] = ids.length
        ? await Promise.all([
            db
              .select()
              .from(workerGpus)
              .where(inArray(workerGpus.worker_id, ids))
              .orderBy(asc(workerGpus.seq)),
            db
              .select()
              .from(workerRuntimes)
              .where(inArray(workerRuntimes.worker_id, ids))
              .orderBy(asc(workerRuntimes.seq)),
            db
              .select()
              .from(workerModels)
              .where(inArray(workerModels.worker_id, ids))
              .orderBy(asc(workerModels.seq)),
            db.select().from(modelPulls).where(inArray(modelPulls.worker_id, ids)),
            db.select().from(modelPullFailures).where(inArray(modelPullFailures.worker_id, ids)),
          ])
        : [[], [], [], [], []]
      const of = <T extends { worker_id: string }>(list: T[], id: string) =>
        list.filter((r) => r.worker_id === id)
      const listed: ListedWorker[] = rows.map((w) => ({
        ...w,
        gpus: of(gpus, w.id),
        runtimes: of(runtimes, w.id),
        models: of(models, w.id),
        pulls: of(pulls, w.id),
        pull_failures: of(failures, w.id),
      }))
      return { rows: listed, has_more }
    },

    async reportedInventory() {
      const [runtimes, models] = await Promise.all([
        db
          .select({ worker_id: workerRuntimes.worker_id, engine: workerRuntimes.engine })
          .from(workerRuntimes)
          .orderBy(asc(workerRuntimes.seq)),
        db
          .select({
            worker_id: workerModels.worker_id,
            name: workerModels.name,
            runtime: workerModels.runtime,
            runtime_model_id: workerModels.runtime_model_id,
            digest: workerModels.digest,
            size_bytes: workerModels.size_bytes,
          })
          .from(workerModels)
          .orderBy(asc(workerModels.seq)),
      ])
      return { runtimes, models }
    },

    async onlineWorkers(cutoff) {
      return db
        .select({
          id: workers.id,
          org_id: workers.org_id,
          last_heartbeat_at: workers.last_heartbeat_at,
          vram_total_gb: workers.vram_total_gb,
          gpu_memory: workers.gpu_memory,
          last_seen_at: workers.last_seen_at,
        })
        .from(workers)
        .where(online(cutoff))
    },
    async placementFleet(cutoff) {
      // docs/api.md §7 placement: the workers that load models, with the models of what each holds.
      const rows = await db
        .select({
          id: workers.id,
          loaded_models: workers.loaded_models,
          loading_models: workers.loading_models,
          model_stats: workers.model_stats,
          // Qualified by hand: drizzle writes a column of the one table it selects from unqualified.
          held: sql<unknown>`coalesce((SELECT json_agg(b.model) FROM (
              SELECT batch_id FROM batch_assignments WHERE worker_id = workers.id AND completed_at IS NULL
              UNION ALL
              SELECT batch_id FROM batch_shards WHERE worker_id = workers.id AND status = 'running') h
            JOIN batches b ON b.id = h.batch_id WHERE b.model IS NOT NULL), '[]'::json)`,
        })
        .from(workers)
        .where(and(eq(workers.loads, true), online(cutoff)))
      return rows.map((r) => ({
        ...r,
        held: (typeof r.held === 'string' ? JSON.parse(r.held) : r.held) as string[],
      }))
    },
    async hostsOf(names) {
      const out = new Map<string, string[]>(names.map((n) => [n, []]))
      if (!names.length) return out
      const rows = await db
        .select({ name: workerModels.name, worker_id: workerModels.worker_id })
        .from(workerModels)
        .where(inArray(workerModels.name, [...names]))
      for (const r of rows) out.get(r.name)!.push(r.worker_id)
      return out
    },
    async workerHosting(workerId) {
      const [runtimes, models] = await Promise.all([
        db
          .select({ engine: workerRuntimes.engine, capabilities: workerRuntimes.capabilities })
          .from(workerRuntimes)
          .where(eq(workerRuntimes.worker_id, workerId)),
        db
          .select(hostedModelColumns(workerModels))
          .from(workerModels)
          .where(eq(workerModels.worker_id, workerId)),
      ])
      const reported: WorkerHosting['reported'] = {}
      for (const r of runtimes) if (r.capabilities) reported[r.engine] = r.capabilities
      return { engines: runtimes.map((r) => r.engine), reported, models }
    },

    async findWorkerWithHosting(id, knownSeq, heads) {
      // One statement, one JSON value: to_jsonb gives bigint and double columns as numbers and
      // jsonb as it is, so the row needs no conversion (Bun's client returns bigint as strings).
      // With the heads, on the claims' connections (their generic plan, queue.ts headsCte); the
      // CTE runs only for a worker that is there.
      const q = heads ? db.$claims : db.$client
      const found = q`'worker', to_jsonb(w),
          'hosting', CASE WHEN w.hosting_seq = ${knownSeq ?? -1}::int THEN NULL ELSE json_build_object(
            'engines', ARRAY(SELECT engine FROM worker_runtimes WHERE worker_id = w.id),
            'reported', coalesce((SELECT json_object_agg(engine, capabilities) FROM worker_runtimes
              WHERE worker_id = w.id AND capabilities IS NOT NULL), '{}'),
            'models', coalesce((SELECT json_agg(json_build_object('name', m.name, 'runtime', m.runtime,
                'digest', m.digest, 'loaded', m.loaded, 'advertised', m.advertised,
                'configured', m.configured, 'on_disk', m.on_disk))
              FROM worker_models m WHERE m.worker_id = w.id), '[]')) END`
      const [row] = (await (heads
        ? q`WITH RECURSIVE ${headsCte(q, heads)}
            SELECT json_build_object(${found}, 'heads', (SELECT coalesce(json_agg(json_build_object(
              'model', model, 'needs', needs, 'user_id', user_id, 'id', id, 'seq', seq)), '[]') FROM heads)) AS found
            FROM workers w WHERE w.id = ${id}`
        : q`SELECT json_build_object(${found}) AS found FROM workers w WHERE w.id = ${id}`)) as {
        found: { worker: WorkerRow; hosting: WorkerHosting | null; heads?: WaitingHead[] }
      }[]
      return row?.found
    },

    async hostsNamed(names) {
      if (names.length === 0) return []
      const heads = await db
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
      const ids = heads.map((w) => w.id)
      if (ids.length === 0) return []
      const [engines, models] = await Promise.all([
        db
          .select({
            worker_id: workerRuntimes.worker_id,
            engine: workerRuntimes.engine,
            capabilities: workerRuntimes.capabilities,
          })
          .from(workerRuntimes)
          .where(inArray(workerRuntimes.worker_id, ids))
          .orderBy(asc(workerRuntimes.seq)),
        db
          .select({ worker_id: workerModels.worker_id, ...hostedModelColumns(workerModels) })
          .from(workerModels)
          .where(inArray(workerModels.worker_id, ids))
          .orderBy(asc(workerModels.seq)),
      ])
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
    },

    async pullsOfWorker(workerId) {
      return db.select().from(modelPulls).where(eq(modelPulls.worker_id, workerId))
    },
    async currentPull(catalogId) {
      const [row] = await db
        .select({ pull: modelPulls, status: workers.status, last_seen_at: workers.last_seen_at })
        .from(modelPulls)
        .leftJoin(workers, eq(workers.id, modelPulls.worker_id))
        .where(eq(modelPulls.catalog_id, catalogId))
      return row
    },
    async dropPull(catalogId, workerId) {
      await db
        .delete(modelPulls)
        .where(and(eq(modelPulls.catalog_id, catalogId), eq(modelPulls.worker_id, workerId)))
    },
    async hasValidatedBatch(models) {
      if (!models.length) return false
      const [row] = await db
        .select({ id: batches.id })
        .from(batches)
        .where(and(eq(batches.status, 'validated'), inArray(batches.model, models)))
        .limit(1)
      return row !== undefined
    },
    async askPull(ask: NewPull, replacing: number | null) {
      // At most one ask per entry across instances: the lapsed ask the caller saw is replaced only
      // if it is still there, and the primary key turns away a second asker (ON CONFLICT DO NOTHING).
      return db.transaction(async (tx) => {
        if (replacing !== null) {
          await tx
            .delete(modelPulls)
            .where(and(eq(modelPulls.catalog_id, ask.catalog_id), eq(modelPulls.asked_at, replacing)))
        }
        const won = await tx
          .insert(modelPulls)
          .values(ask)
          .onConflictDoNothing()
          .returning({ catalog_id: modelPulls.catalog_id })
        return won.length === 1
      })
    },
    async pullFailuresOfWorker(workerId) {
      return db.select().from(modelPullFailures).where(eq(modelPullFailures.worker_id, workerId))
    },
    async pullFailuresFor(catalogIds) {
      if (catalogIds.length === 0) return []
      return db
        .select({ failure: modelPullFailures, worker: { name: workers.name, org_id: workers.org_id } })
        .from(modelPullFailures)
        .innerJoin(workers, eq(workers.id, modelPullFailures.worker_id))
        .where(inArray(modelPullFailures.catalog_id, [...catalogIds]))
    },
    async setPullFailure(failure) {
      const { catalog_id, worker_id, ...rest } = failure
      await db
        .insert(modelPullFailures)
        .values(failure)
        .onConflictDoUpdate({
          target: [modelPullFailures.catalog_id, modelPullFailures.worker_id],
          set: rest,
        })
    },
    async clearPullFailure(catalogId, workerId) {
      await db
        .delete(modelPullFailures)
        .where(and(eq(modelPullFailures.catalog_id, catalogId), eq(modelPullFailures.worker_id, workerId)))
    },

    async capacityCounts(cutoff) {
      const [c] = await db
        .select({
          online: sql<number>`count(*)::int`,
          idle: sql<number>`(count(*) FILTER (WHERE ${workers.activity} = 'idle'))::int`,
          vram: sql<number>`coalesce(sum(${workers.vram_total_gb}), 0)::float8`,
        })
        .from(workers)
        .where(online(cutoff))
      return c!
    },
    async gpusOnline(cutoff) {
      const [g] = await db
        .select({ n: sql<number>`count(*)::int` })
        .from(workerGpus)
        .innerJoin(workers, eq(workers.id, workerGpus.worker_id))
        .where(online(cutoff))
      return g!.n
    },
    async orgIdsOf(userId) {
      const rows = await db
        .select({ org_id: memberships.org_id })
        .from(memberships)
        .where(eq(memberships.user_id, userId))
      return rows.map((m) => m.org_id)
    },
    async batchCounts() {
      return db.select({ status: batches.status, n: count() }).from(batches).groupBy(batches.status)
    },
    async workerCounts(cutoff) {
      const liveness = sql<
        'online' | 'offline'
      >`CASE WHEN ${workers.status} = 'online' AND ${workers.last_seen_at} > ${cutoff} THEN 'online' ELSE 'offline' END`
      return (
        db
          .select({ status: liveness, activity: workers.activity, n: count() })
          .from(workers)
          // By position: PostgreSQL cannot tell that two bound cutoffs are the same expression.
          .groupBy(sql`1`, sql`2`)
      )
    },
  }
}
