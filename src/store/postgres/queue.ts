import { and, eq, inArray, isNull, lte, or, sql } from 'drizzle-orm'
import type { Config } from '../../config'
import * as schema from '../../db/pg/schema'
import type { BatchAssignmentRow, BatchRow } from '../../db/schema'
import { forbidden } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { BATCH_TRANSITIONS, type BatchChanges, type BatchEvent } from '../../modules/batches/states'
import { type RequeueOutcome, type RequeueReason, requeueDecision } from '../../modules/workers/requeue'
import { checkHolder, pickClaim } from '../../modules/workers/rules'
import type {
  Claimed,
  ClaimRequest,
  DeliveredResults,
  FailureReport,
  QueueStore,
  SweepOutcome,
} from '../queue'
import type { PgDb, PgTx } from './db'
import { enqueueWebhookEvents } from './webhooks'

// The work queue on PostgreSQL, where any number of instances share one database. Claims lock the
// head of each candidate model with FOR UPDATE SKIP LOCKED, so concurrent polls skip each other's
// rows instead of queueing behind them; UNIQUE(batch_id) stays the backstop.

const { batches, batchAssignments, files, workers, modelPulls, maintenanceRuns } = schema

/** The state table's guarded UPDATE (STYLE example 7), in PostgreSQL: null when not in `from`. */
export async function transition(
  tx: PgTx,
  batchId: string,
  event: BatchEvent,
  now: number,
  changes: BatchChanges,
  reason: string,
): Promise<BatchRow | null> {
  const { from, to } = BATCH_TRANSITIONS[event]
  const [row] = await tx
    .update(batches)
    .set({ ...(changes as object), status: to, updated_at: now })
    .where(and(eq(batches.id, batchId), eq(batches.status, from)))
    .returning()
  if (row) log.info('batch transition', { batch_id: batchId, from, to, event, reason })
  // API.md §13: the owner's webhook events are written in this same transaction (the outbox).
  if (row) await enqueueWebhookEvents(tx, row as BatchRow, event, now)
  return (row as BatchRow | undefined) ?? null
}

/** One failed attempt of a batch the caller has locked and seen in_progress (requeue rule). */
export async function requeueLocked(
  tx: PgTx,
  maxAttempts: number,
  batch: { id: string; attempts: number; request_counts_total: number; model: string | null },
  reason: RequeueReason,
  errorText: string,
  now: number,
): Promise<RequeueOutcome | null> {
  const decision = requeueDecision(batch, maxAttempts, errorText, now)
  await tx.delete(batchAssignments).where(eq(batchAssignments.batch_id, batch.id))
  if (!(await transition(tx, batch.id, decision.event, now, decision.changes, reason))) return null
  return decision.outcome
}

/**
 * The head of each candidate model (API.md §7: oldest first), one probe of
 * batches_status_model each, skipping rows other polls hold. Written so that the planner cannot
 * take the primary key instead: with `status = 'validated'` and `ORDER BY seq`, it walks seq from
 * the start and filters, believing matches evenly spread, and every claim then steps over the
 * batches claimed before it and over other models' older batches (measured: 20,000 rows, 8–28 ms
 * a probe). `status = ANY('{validated}')` is no planner constant, so ORDER BY status, seq is an
 * order only the (status, model, seq) index gives without a sort.
 */
export function claimHeads(models: string[]) {
  const values = sql.join(
    models.map((model, i) => sql`(${model}::text, ${i}::int)`),
    sql`, `,
  )
  return sql`
    SELECT c.i AS i, b.id AS id, b.seq::float8 AS seq
    FROM (VALUES ${values}) AS c(model, i)
    CROSS JOIN LATERAL (
      SELECT id, seq FROM batches
      WHERE status = ANY('{validated}'::text[]) AND model = c.model
      ORDER BY status, seq LIMIT 1
      FOR UPDATE SKIP LOCKED
    ) b`
}

export function postgresQueue(db: PgDb, config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>): QueueStore {
  const maxAttempts = config.MAX_BATCH_ATTEMPTS
  return {
    async claim<M>(req: ClaimRequest<M>): Promise<Claimed<M> | null> {
      if (req.candidates.length === 0) return null
      return db.transaction(async (tx) => {
        // One worker's polls take turns (max_concurrent_jobs); other workers' polls do not wait.
        const [me] = await tx
          .select({ id: workers.id })
          .from(workers)
          .where(eq(workers.id, req.workerId))
          .for('update')
        if (!me) return null
        const [active] = await tx
          .select({ n: sql<number>`count(*)::int` })
          .from(batchAssignments)
          .where(and(eq(batchAssignments.worker_id, req.workerId), isNull(batchAssignments.completed_at)))
        if ((active?.n ?? 0) >= req.maxConcurrent) return null
        const rows = (await tx.execute(claimHeads(req.candidates.map((c) => c.model)))) as unknown as {
          i: number
          id: string
          seq: number
        }[]
        const heads = rows.map((r) => {
          const c = req.candidates[r.i]!
          return { batch_id: r.id, seq: r.seq, loaded: c.loaded, match: c.match }
        })
        const best = pickClaim(heads)
        if (!best) return null
        const batch = await transition(
          tx,
          best.batch_id,
          'claimed',
          req.now,
          { in_progress_at: req.now },
          `worker ${req.workerId}`,
        )
        if (!batch) return null
        const assignmentId = newId('asg_')
        await tx.insert(batchAssignments).values({
          id: assignmentId,
          batch_id: batch.id,
          worker_id: req.workerId,
          org_id: req.orgId,
          assigned_at: req.now,
        })
        return { batch, assignmentId, match: best.match }
      })
    },

    async batchWithAssignment(batchId) {
      const [row] = await db
        .select({ batch: batches, assignment: batchAssignments })
        .from(batches)
        .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
        .where(eq(batches.id, batchId))
      return {
        batch: (row?.batch as BatchRow | undefined) ?? null,
        assignment: (row?.assignment as BatchAssignmentRow | null | undefined) ?? null,
      }
    },

    async recordResults(r: DeliveredResults) {
      return db.transaction(async (tx) => {
        const [held] = await tx
          .select({
            status: batches.status,
            holder: batchAssignments.worker_id,
            assignment_id: batchAssignments.id,
            assignment_completed_at: batchAssignments.completed_at,
          })
          .from(batches)
          .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
          .where(eq(batches.id, r.batchId))
          .for('update', { of: batches })
        checkHolder(held, r.workerId, r.assignmentId)
        const row = await transition(
          tx,
          r.batchId,
          'results_delivered',
          r.now,
          r.changes,
          `worker ${r.workerId}`,
        )
        if (!row) throw forbidden('not_assigned', 'This batch is not assigned to this worker')
        await tx
          .update(batchAssignments)
          .set({ completed_at: r.now })
          .where(eq(batchAssignments.batch_id, r.batchId))
        if (r.files.length) await tx.insert(files).values(r.files)
        return row
      })
    },

    async reportFailure(r: FailureReport) {
      return db.transaction(async (tx) => {
        const [row] = await tx
          .select({
            id: batches.id,
            status: batches.status,
            attempts: batches.attempts,
            request_counts_total: batches.request_counts_total,
            model: batches.model,
            holder: batchAssignments.worker_id,
            assignment_id: batchAssignments.id,
            assignment_completed_at: batchAssignments.completed_at,
          })
          .from(batches)
          .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
          .where(eq(batches.id, r.jobId))
          .for('update', { of: batches })
        const held = checkHolder(row, r.workerId, r.assignmentId)
        // Locked and seen in_progress by the holder rule: the requeue happens.
        return (await requeueLocked(tx, maxAttempts, held, 'reported_failure', r.error, r.now))!
      })
    },

    async sweep(now: number, cutoff: number): Promise<SweepOutcome> {
      return db.transaction(async (tx) => {
        const workers_offline = (
          await tx
            .update(workers)
            .set({ status: 'offline' })
            .where(and(eq(workers.status, 'online'), lte(workers.last_seen_at, cutoff)))
            .returning({ id: workers.id })
        ).map((w) => w.id)
        // Every in_progress batch whose holder is not live: silent, offline, or no longer there.
        const orphans = await tx
          .select({
            id: batches.id,
            attempts: batches.attempts,
            request_counts_total: batches.request_counts_total,
            model: batches.model,
            worker_id: batchAssignments.worker_id,
          })
          .from(batches)
          .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
          .leftJoin(workers, eq(workers.id, batchAssignments.worker_id))
          .where(
            and(
              eq(batches.status, 'in_progress'),
              or(isNull(workers.id), eq(workers.status, 'offline'), lte(workers.last_seen_at, cutoff)),
            ),
          )
          .for('update', { of: batches })
        const requeues: SweepOutcome['requeues'] = []
        for (const o of orphans) {
          const error = `worker ${o.worker_id ?? 'unknown'} went silent`
          const outcome = await requeueLocked(tx, maxAttempts, o, 'worker_silent', error, now)
          if (outcome) requeues.push({ ...outcome, reason: 'worker_silent' })
        }
        // An offline worker downloads nothing for us: let another be asked (API.md §7 pull_models).
        if (workers_offline.length)
          await tx.delete(modelPulls).where(inArray(modelPulls.worker_id, workers_offline))
        return { workers_offline, requeues }
      })
    },

    async tryRunEvery(name: string, now: number, intervalSeconds: number) {
      const won = await db
        .insert(maintenanceRuns)
        .values({ name, last_run_at: now })
        .onConflictDoUpdate({
          target: maintenanceRuns.name,
          set: { last_run_at: now },
          setWhere: lte(maintenanceRuns.last_run_at, now - intervalSeconds),
        })
        .returning({ name: maintenanceRuns.name })
      return won.length === 1
    },
  }
}
