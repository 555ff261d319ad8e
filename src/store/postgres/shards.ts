import type { SQL } from 'bun'
import { and, asc, eq, getTableColumns, inArray, type SQLWrapper, sql } from 'drizzle-orm'
import { alias, type PgUpdateSetSource } from 'drizzle-orm/pg-core'
import * as schema from '../../db/pg/schema'
import type { BatchRow, BatchShardRow } from '../../db/schema'
import { BATCH_TRANSITIONS } from '../../domain/batch-states'
import {
  countsAttempt,
  type RequeueCause,
  type RequeueOutcome,
  type RequeueReason,
  requeueDecision,
} from '../../domain/requeue'
import {
  type BackupCandidate,
  type CopyCounts,
  type CutShard,
  checkShardHolder,
  copyEnded,
  nextShardSize,
  pickBackup,
  placeCut,
  type ShardBounds,
  type ShardCopy,
  type ShardHolding,
  type ShardState,
  shardCounts,
  splittable,
} from '../../domain/shards'
import { SILENT_REASON, silentRequeue } from '../../domain/sweep'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { lineSpansFrom, SPAN_BYTES } from '../batches'
import { type DeliveredShard, type ShardResultsRecorded, takesNeeds } from '../queue'
import type { PgDb, PgTx } from './db'
import { batchRow, transition } from './transition'

// Shards on PostgreSQL (docs/api.md §16): the statements, and the verbs that run inside the queue's and
// the fleet's transactions. What to cut and when to requeue is decided in src/domain/shards.ts and
// the requeue rule; this file applies it.
//
// Lock order: a shard's batch row first (FOR UPDATE), then the shard row. Every writer of a shard —
// the claim that cuts or takes it or starts its backup copy, progress, results, report-failure, the
// sweeper, re-registration — takes both in that order, so none of them deadlocks another, and a
// requeue that decides from the batch's other shards (requeueShardLocked) sees every claim of that
// batch committed or not begun.

const { batches, batchShards, workers } = schema

/** Bun's client returns bigint columns as strings; drizzle's schema says which are numbers. */
const shardBigints = Object.entries(getTableColumns(batchShards))
  .filter(([, c]) => c.columnType === 'PgBigInt53' || c.columnType === 'PgBigSerial53')
  .map(([name]) => name)
export function shardRow(raw: Record<string, unknown>): BatchShardRow {
  for (const name of shardBigints)
    if (raw[name] !== null && raw[name] !== undefined) raw[name] = Number(raw[name])
  return raw as unknown as BatchShardRow
}

// ---------------------------------------------------------------------------------------------
// The claim (a shard-capable worker's poll), on db.$claims.

/**
 * Split batches in progress with work left to hand out (a waiting shard, or requests not yet cut)
 * for the candidate models: the claim's extra heads (batches_split_model).
 */
export function openSplitHeads(q: SQL, models: string[]) {
  return q`
    SELECT model, needs, user_id, id, seq::float8 AS seq FROM batches
    WHERE split AND status = 'in_progress' AND model = ANY(${models}::text[])
      AND (next_request < request_counts_total
        OR EXISTS (SELECT FROM batch_shards s WHERE s.batch_id = batches.id AND s.status = 'waiting'))` as Promise<
    { model: string; needs: string; user_id: string; id: string; seq: number }[]
  >
}

/** An advisory lock key per worker: the claims of one shard-capable worker take turns. */
const claimKey = (workerId: string) => `gridkeep claim\n${workerId}`

/**
 * docs/api.md §7 max_concurrent_jobs counting held shards and backup copies (docs/api.md §16).
 * Shards hold no slot (batch_assignments_slot), so the claims of a shard-capable worker take turns
 * on an advisory lock named by the worker instead: each counts, under the lock, every assignment and shard the
 * worker's earlier claims committed. The worker row's KEY SHARE orders the claim with
 * re-registration, as claimOne does. Pipelined: each statement's snapshot follows the one before,
 * so the count is taken after the lock is held.
 */
async function lockWorker(q: SQL, workerId: string) {
  const [, found, counted] = await Promise.all([
    q`SELECT pg_advisory_xact_lock(hashtextextended(${claimKey(workerId)}, 0))`,
    q`SELECT id FROM workers WHERE id = ${workerId} FOR KEY SHARE`,
    q`SELECT (SELECT count(*) FROM batch_assignments WHERE worker_id = ${workerId} AND completed_at IS NULL)::int
        + (SELECT count(*) FROM batch_shards WHERE worker_id = ${workerId} AND status = 'running')::int
        + (SELECT count(*) FROM batch_shards WHERE backup_worker_id = ${workerId} AND status = 'running')::int AS n`,
  ])
  return { exists: (found as unknown[]).length === 1, active: (counted as { n: number }[])[0]!.n }
}

export interface ShardClaimRequest {
  workerId: string
  orgId: string
  now: number
  maxConcurrent: number
  bounds: ShardBounds
  cutoff: number
}

export type ShardClaim =
  | { kind: 'claimed'; batch: BatchRow; shard: BatchShardRow | null; assignmentId: string; backup: boolean }
  /** The worker holds max_concurrent_jobs jobs (or is gone): nothing more for this poll. */
  | { kind: 'full' }
  /** This head has nothing to hand out any more (taken, finished, failed): try the next. */
  | { kind: 'missed' }

/**
 * One claim of a shard-capable worker from one head, in one transaction on `q`: a shard of a split
 * or splittable batch (a requeued shard first, then the next cut by guided sizing), or the whole
 * batch when it runs whole (src/domain/shards.ts splittable).
 */
export async function claimFromHead(
  q: SQL,
  batchId: string,
  req: ShardClaimRequest,
  names: readonly string[],
): Promise<ShardClaim> {
  const { exists, active } = await lockWorker(q, req.workerId)
  if (!exists || active >= req.maxConcurrent) return { kind: 'full' }
  // The batch row, locked: claims of one batch take turns on it, and so do its requeues.
  const [b] = (await q`
    SELECT status, split, next_request, request_counts_total AS total, ordered,
      EXISTS (SELECT FROM batch_line_index i WHERE i.batch_id = batches.id) AS indexed
    FROM batches WHERE id = ${batchId} FOR UPDATE`) as {
    status: string
    split: boolean
    next_request: number
    total: number
    ordered: boolean
    indexed: boolean
  }[]
  const { from, to } = BATCH_TRANSITIONS.claimed
  if (!b || (b.status !== from && b.status !== to)) return { kind: 'missed' }
  if (!b.split && (b.status !== from || !splittable(b.total, req.bounds, b.indexed))) {
    const assignmentId = newId('asg_')
    const batch = await claimWholeById(q, batchId, { ...req, id: assignmentId })
    return batch ? { kind: 'claimed', batch, shard: null, assignmentId, backup: false } : { kind: 'missed' }
  }
  const assignmentId = newId('asg_')
  // A waiting (requeued) shard first, in shard order.
  let [raw] = (await q`
    UPDATE batch_shards SET status = 'running', worker_id = ${req.workerId}, org_id = ${req.orgId},
      assignment_id = ${assignmentId}, assigned_at = ${req.now}, updated_at = ${req.now}
    WHERE id = (SELECT id FROM batch_shards WHERE batch_id = ${batchId} AND status = 'waiting'
                ORDER BY shard_index LIMIT 1 FOR UPDATE SKIP LOCKED)
      AND status = 'waiting'
    RETURNING *`) as Record<string, unknown>[]
  if (!raw) {
    const unclaimed = b.total - b.next_request
    if (unclaimed <= 0) return { kind: 'missed' }
    const [{ n }] = (await q`
      SELECT count(DISTINCT w.id)::int AS n FROM worker_models m JOIN workers w ON w.id = m.worker_id
      WHERE m.name = ANY(${[...names]}::text[])
        AND w.shards AND w.status = 'online' AND w.last_seen_at > ${req.cutoff}`) as [{ n: number }]
    const size = nextShardSize(unclaimed, n, req.bounds)
    // In the file order the cuts follow one another; in an execution order of its own (docs/api.md
    // §6) each worker continues its prefix groups (placeCut). The batch row is locked: the shards
    // read are every one cut.
    const place = b.ordered
      ? placeCut(
          (await q`
            SELECT first_request, requests, worker_id, status, seq::float8 AS seq
            FROM batch_shards WHERE batch_id = ${batchId}`) as CutShard[],
          b.total,
          req.workerId,
          size,
        )
      : { first: b.next_request, requests: size }
    if (!place) return { kind: 'missed' }
    // The cut: the batch's count of cut requests grows by the shard, guarded by what it was.
    raw = (
      (await q`
      WITH cut AS (
        UPDATE batches SET split = TRUE, next_request = next_request + ${place.requests}, updated_at = ${req.now}
        WHERE id = ${batchId} AND next_request = ${b.next_request}
        RETURNING id, user_id
      )
      INSERT INTO batch_shards (id, batch_id, user_id, shard_index, first_request, requests, status,
        worker_id, org_id, assignment_id, assigned_at, updated_at)
      SELECT ${newId('shard_')}, cut.id, cut.user_id,
        (SELECT count(*) FROM batch_shards WHERE batch_id = ${batchId}), ${place.first}, ${place.requests},
        'running', ${req.workerId}, ${req.orgId}, ${assignmentId}, ${req.now}, ${req.now}
      FROM cut
      RETURNING *`) as Record<string, unknown>[]
    )[0]
    if (!raw) return { kind: 'missed' }
  }
  const shard = shardRow(raw)
  let batchRaw: Record<string, unknown> | undefined
  if (b.status === from) {
    ;[batchRaw] = (await q`
      UPDATE batches SET status = ${to}, in_progress_at = ${req.now}, updated_at = ${req.now}
      WHERE id = ${batchId} AND status = ${from} RETURNING *`) as Record<string, unknown>[]
    if (batchRaw) {
      log.info('batch transition', {
        batch_id: batchId,
        from,
        to,
        event: 'claimed',
        reason: `worker ${req.workerId}`,
      })
    }
  } else {
    ;[batchRaw] = (await q`SELECT * FROM batches WHERE id = ${batchId}`) as Record<string, unknown>[]
  }
  if (!batchRaw) throw new Error(`batch ${batchId} changed under its lock`)
  return { kind: 'claimed', batch: batchRow(batchRaw), shard, assignmentId, backup: false }
}

/**
 * The running shards of split batches in progress of `models` (of one batch, when `batchId` is
 * given), with what pickBackup reads of their batches.
 */
async function backupCandidates(q: SQL, models: string[], batchId: string | null) {
  const rows = (await q`
    SELECT s.id AS shard_id, s.seq::float8 AS seq, s.worker_id, s.assigned_at::float8 AS assigned_at,
      s.attempts, s.backup_worker_id, s.batch_id, b.model, b.needs,
      b.next_request < b.request_counts_total AS batch_uncut,
      EXISTS (SELECT FROM batch_shards w WHERE w.batch_id = b.id AND w.status = 'waiting') AS batch_waiting
    FROM batches b JOIN batch_shards s ON s.batch_id = b.id AND s.status = 'running'
    WHERE b.split AND b.status = 'in_progress' AND b.model = ANY(${models}::text[])
      AND (${batchId}::text IS NULL OR b.id = ${batchId}::text)`) as (Omit<BackupCandidate, 'loaded'> & {
    batch_id: string
    model: string
    needs: string
  })[]
  return rows
}

/**
 * docs/api.md §16 backup copies, when a poll found nothing else to claim: the shard pickBackup
 * chooses among the running shards of `models`' split batches whose needs the worker meets
 * (docs/api.md §7 Poll rule 7) gets this worker as its backup. The choice is first made without a
 * lock on the claims' pool `pool` (an idle poll with no backup to hand out opens no transaction);
 * then, in one transaction, under the worker's claim lock (lockWorker counts its jobs), the chosen
 * shard's batch is locked and the choice made again on what it holds now (a requeue or another
 * backup may have come first), as every writer of its shards takes that lock first.
 */
export async function claimBackup(
  pool: SQL,
  req: { workerId: string; orgId: string; now: number; maxConcurrent: number },
  models: ReadonlyMap<string, { loaded: boolean; needs?: readonly string[] }>,
  maxAttempts: number,
): Promise<ShardClaim> {
  const names = [...models.keys()]
  const withLoaded = <T extends { model: string; needs: string }>(rows: T[]) =>
    rows
      .filter((r) => takesNeeds(models.get(r.model)!).includes(r.needs))
      .map((r) => ({ ...r, loaded: models.get(r.model)?.loaded ?? false }))
  let candidates = withLoaded(await backupCandidates(pool, names, null))
  if (!pickBackup(candidates, req.workerId, maxAttempts)) return { kind: 'missed' }
  return pool.begin(async (tx) => {
    const q = tx as unknown as SQL
    const { exists, active } = await lockWorker(q, req.workerId)
    if (!exists || active >= req.maxConcurrent) return { kind: 'full' } as const
    for (let pick = pickBackup(candidates, req.workerId, maxAttempts); pick; ) {
      const batchId = pick.batch_id
      await q`SELECT id FROM batches WHERE id = ${batchId} FOR UPDATE`
      const chosen = pickBackup(
        withLoaded(await backupCandidates(q, names, batchId)),
        req.workerId,
        maxAttempts,
      )
      if (chosen) {
        const assignmentId = newId('asg_')
        const [raw] = (await q`
          UPDATE batch_shards SET backup_worker_id = ${req.workerId}, backup_org_id = ${req.orgId},
            backup_assignment_id = ${assignmentId}, backup_assigned_at = ${req.now},
            backup_request_counts_completed = 0, backup_request_counts_failed = 0, backup_won = FALSE,
            updated_at = ${req.now}
          WHERE id = ${chosen.shard_id} AND status = 'running' AND backup_worker_id IS NULL
            AND worker_id <> ${req.workerId}
          RETURNING *`) as Record<string, unknown>[]
        if (raw) {
          const [batchRaw] = (await q`SELECT * FROM batches WHERE id = ${batchId}`) as Record<
            string,
            unknown
          >[]
          return {
            kind: 'claimed',
            batch: batchRow(batchRaw!),
            shard: shardRow(raw),
            assignmentId,
            backup: true,
          } as const
        }
      }
      candidates = candidates.filter((c) => c.batch_id !== batchId)
      pick = pickBackup(candidates, req.workerId, maxAttempts)
    }
    return { kind: 'missed' } as const
  })
}

/**
 * The whole batch `batchId`, for a shard-capable worker under its claim lock (lockWorker counted
 * its jobs): the state table's `claimed` edge and the assignment in one statement, in the lowest
 * free slot (batch_assignments_slot: a claim of claimOne's may run beside it).
 */
async function claimWholeById(
  q: SQL,
  batchId: string,
  a: { id: string; workerId: string; orgId: string; now: number },
): Promise<BatchRow | null> {
  const { from, to } = BATCH_TRANSITIONS.claimed
  const [raw] = (await q`
    WITH open AS (
      SELECT coalesce(min(i) FILTER (WHERE slot <> i), count(slot))::int AS slot
      FROM (SELECT slot, (row_number() OVER (ORDER BY slot) - 1)::int AS i FROM batch_assignments
            WHERE worker_id = ${a.workerId} AND completed_at IS NULL) held
    ), claimed AS (
      UPDATE batches SET status = ${to}, in_progress_at = ${a.now}, updated_at = ${a.now}
      WHERE id = ${batchId} AND status = ${from} AND NOT split
      RETURNING *
    ), assigned AS (
      INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at, slot)
      SELECT ${a.id}, id, ${a.workerId}, ${a.orgId}, ${a.now}, (SELECT slot FROM open) FROM claimed
    )
    SELECT * FROM claimed`) as Record<string, unknown>[]
  if (!raw) return null
  log.info('batch transition', {
    batch_id: batchId,
    from,
    to,
    event: 'claimed',
    reason: `worker ${a.workerId}`,
  })
  return batchRow(raw)
}

// ---------------------------------------------------------------------------------------------
// Writers inside drizzle transactions (progress, results, failure, sweep, re-registration).

export interface LockedShard {
  shard: BatchShardRow
  batch: BatchRow
  holding: ShardHolding
}

/** A shard and its batch, both locked (batch first: the lock order above); null when unknown. */
export async function lockShard(tx: PgTx, shardId: string): Promise<LockedShard | null> {
  const [batch] = (await tx
    .select()
    .from(batches)
    .where(sql`${batches.id} = (SELECT batch_id FROM batch_shards WHERE id = ${shardId})`)
    .for('update')) as BatchRow[]
  if (!batch) return null
  const [shard] = (await tx
    .select()
    .from(batchShards)
    .where(eq(batchShards.id, shardId))
    .for('update')) as BatchShardRow[]
  if (!shard) return null
  return {
    shard,
    batch,
    holding: {
      status: shard.status,
      worker_id: shard.worker_id,
      assignment_id: shard.assignment_id,
      backup_worker_id: shard.backup_worker_id,
      backup_assignment_id: shard.backup_assignment_id,
      batch_status: batch.status,
    },
  }
}

/** The shard holder rule (docs/api.md §16) on a locked shard; `copy` is the copy that wrote. */
export function heldShard(locked: LockedShard | null, workerId: string, assignmentId: string | undefined) {
  const { copy } = checkShardHolder(locked?.holding, workerId, assignmentId)
  return { ...locked!, copy }
}

/** A locked shard's copies' own counts (the backup's null without one). */
function copiesOf(shard: BatchShardRow): { holder: CopyCounts; backup: CopyCounts | null } {
  return {
    holder: { completed: shard.request_counts_completed, failed: shard.request_counts_failed },
    backup:
      shard.backup_assignment_id === null
        ? null
        : { completed: shard.backup_request_counts_completed, failed: shard.backup_request_counts_failed },
  }
}

/**
 * The in_progress batch's live counts moved as one shard's went from `before` to `after`
 * (docs/api.md §16: the sum of its shards'); after a copy `ended`, its attempts are its shards'
 * highest and its error the last one.
 */
async function moveBatchCounts(
  tx: PgTx,
  batchId: string,
  before: CopyCounts,
  after: CopyCounts,
  now: number,
  ended?: { attempts: number; error: string },
) {
  await tx
    .update(batches)
    .set({
      ...(ended && { attempts: sql`greatest(${batches.attempts}, ${ended.attempts})`, error: ended.error }),
      request_counts_completed: sql`${batches.request_counts_completed} + ${after.completed - before.completed}`,
      request_counts_failed: sql`${batches.request_counts_failed} + ${after.failed - before.failed}`,
      updated_at: now,
    })
    .where(and(eq(batches.id, batchId), eq(batches.status, 'in_progress')))
}

/** The backup columns of a shard without a backup copy. */
const NO_BACKUP = {
  backup_worker_id: null,
  backup_org_id: null,
  backup_assignment_id: null,
  backup_assigned_at: null,
  backup_request_counts_completed: 0,
  backup_request_counts_failed: 0,
} as const

/**
 * A guarded write of a running shard (ARCHITECTURE.md rule 7): applied only while `lease` (the
 * copy's assignment as the caller locked it) still stands; false for a stale caller.
 */
async function setRunningShard(
  tx: PgTx,
  shardId: string,
  lease: SQLWrapper,
  set: PgUpdateSetSource<typeof batchShards>,
): Promise<boolean> {
  const changed = await tx
    .update(batchShards)
    .set(set)
    .where(and(eq(batchShards.id, shardId), eq(batchShards.status, 'running'), lease))
    .returning({ id: batchShards.id })
  return changed.length > 0
}

/**
 * One copy of a running shard, locked by the caller, ended without results (report-failure, a
 * silent worker, re-registration), by copyEnded (docs/api.md §16): the shard's only copy is requeued
 * (requeueShardLocked); otherwise the other copy carries on — promoted to holder, or the holder
 * left alone — with one attempt counted and the error stored. Null for a stale caller.
 */
export async function endShardCopyLocked(
  tx: PgTx,
  maxAttempts: number,
  locked: LockedShard,
  copy: ShardCopy,
  cause: RequeueCause,
  now: number,
): Promise<RequeueOutcome | null> {
  const { shard, batch } = locked
  if (shard.status !== 'running' || batch.status !== 'in_progress') return null
  const plan = copyEnded(shard, copy, cause.error, countsAttempt(cause.reason))
  if (plan.kind === 'requeue') return requeueShardLocked(tx, maxAttempts, shard, batch, cause, now)
  const { holder, backup } = copiesOf(shard)
  const before = shardCounts(holder, backup)
  const after = plan.kind === 'promote' ? backup! : holder
  const changed = await setRunningShard(
    tx,
    shard.id,
    eq(batchShards.backup_assignment_id, shard.backup_assignment_id!),
    {
      ...(plan.kind === 'promote'
        ? {
            worker_id: shard.backup_worker_id,
            org_id: shard.backup_org_id,
            assignment_id: shard.backup_assignment_id,
            assigned_at: shard.backup_assigned_at,
            request_counts_completed: backup!.completed,
            request_counts_failed: backup!.failed,
          }
        : {}),
      ...NO_BACKUP,
      attempts: plan.attempts,
      updated_at: now,
    },
  )
  if (!changed) return null
  // The batch stays in_progress.
  await moveBatchCounts(tx, batch.id, before, after, now, plan)
  return {
    status: 'validated',
    batch_id: batch.id,
    attempts: plan.attempts,
    error: plan.error,
    model: batch.model,
    backup: plan.kind === 'promote' ? 'promoted' : 'failed',
  }
}

/**
 * One failed attempt of a running shard with no other copy, locked by the caller and seen running in
 * its in_progress batch (the requeue rule, per shard: docs/api.md §16). The shard waits again,
 * offered before any new shard; the batch fails when the shard's attempts are used up, goes back to
 * validated when no other shard runs or is done, and otherwise stays in_progress with its shards'
 * highest attempts. Null for a stale caller.
 */
async function requeueShardLocked(
  tx: PgTx,
  maxAttempts: number,
  shard: BatchShardRow,
  batch: BatchRow,
  { reason, error }: RequeueCause,
  now: number,
): Promise<RequeueOutcome | null> {
  const decision = requeueDecision(
    { ...batch, attempts: shard.attempts },
    maxAttempts,
    error,
    now,
    countsAttempt(reason),
  )
  const attempts = Math.max(batch.attempts, decision.changes.attempts)
  const released = await setRunningShard(tx, shard.id, eq(batchShards.assignment_id, shard.assignment_id!), {
    status: 'waiting',
    attempts: decision.changes.attempts,
    worker_id: null,
    org_id: null,
    assignment_id: null,
    assigned_at: null,
    request_counts_completed: 0,
    request_counts_failed: 0,
    ...NO_BACKUP,
    updated_at: now,
  })
  if (!released) return null
  const [{ n }] = (await tx
    .select({ n: sql<number>`count(*)::int` })
    .from(batchShards)
    .where(and(eq(batchShards.batch_id, batch.id), sql`${batchShards.status} <> 'waiting'`))) as [
    { n: number },
  ]
  if (decision.event === 'attempts_exhausted' || n === 0) {
    const row = await transition(tx, batch.id, decision.event, now, { ...decision.changes, attempts }, reason)
    if (!row) return null
    if (decision.event === 'attempts_exhausted') {
      await stopRunningShards(tx, batch.id, now)
      return { ...decision.outcome, parts: await takeParts(tx, batch.id) }
    }
  } else {
    // The batch stays in_progress; its live counts lose the shard's.
    const ended = { attempts, error: decision.changes.error }
    await moveBatchCounts(tx, batch.id, copiesOf(shard).holder, { completed: 0, failed: 0 }, now, ended)
  }
  return decision.outcome
}

/**
 * docs/api.md §16: the batch failed, so its other running shards hold nothing any more: they stop
 * counting toward their workers' max_concurrent_jobs and leave assigned_job_ids. Their holder and
 * assignment stay (and a backup's), so a later write hears 409 `batch_not_in_progress`, not 403.
 */
async function stopRunningShards(tx: PgTx, batchId: string, now: number) {
  await tx
    .update(batchShards)
    .set({ status: 'waiting', updated_at: now })
    .where(and(eq(batchShards.batch_id, batchId), eq(batchShards.status, 'running')))
}

/**
 * The blob keys of a batch's result parts, cleared from its shards in one statement (joined, or
 * their batch failed: the caller removes them). The caller holds the batch row's lock.
 */
export async function takeParts(tx: PgTx, batchId: string): Promise<string[]> {
  const rows = (await tx.execute(sql`
    UPDATE batch_shards s SET output_key = NULL, error_key = NULL
    FROM (SELECT id, output_key, error_key FROM batch_shards
          WHERE batch_id = ${batchId} AND (output_key IS NOT NULL OR error_key IS NOT NULL)
          FOR UPDATE) old
    WHERE s.id = old.id
    RETURNING old.output_key, old.error_key`)) as unknown as {
    output_key: string | null
    error_key: string | null
  }[]
  return rows.flatMap((r) => [r.output_key, r.error_key]).filter((k): k is string => k !== null)
}

/** A worker's copy of a shard: its lease when selected (the holder's or the backup's). */
interface Lease {
  id: string
  batch_id: string
  worker_id: string | null
  assignment_id: string | null
  error: string
}

/**
 * Ends each of `leases` that still stands when locked (the same shard, the same worker on the same
 * assignment, as holder or backup: a backup promoted meanwhile ends as the holder it now is): a
 * shard requeued and taken again meanwhile belongs to its new holder. The batches are locked in
 * the order of their ids (a shard's leases in the order given: the holder's first), so two
 * transactions locking several (the sweeper, a re-registration) never wait for each other in a
 * circle; the outcomes come in the order of `leases` (claim order).
 */
async function endLeases(tx: PgTx, maxAttempts: number, leases: Lease[], reason: RequeueReason, now: number) {
  const out: (RequeueOutcome | null)[] = leases.map(() => null)
  const order = leases.map((_, i) => i).sort((a, b) => (leases[a]!.batch_id < leases[b]!.batch_id ? -1 : 1))
  for (const i of order) {
    const l = leases[i]!
    const locked = await lockShard(tx, l.id)
    if (!locked) continue
    const { shard } = locked
    const copy: ShardCopy | null =
      shard.worker_id === l.worker_id && shard.assignment_id === l.assignment_id
        ? 'holder'
        : shard.backup_worker_id === l.worker_id && shard.backup_assignment_id === l.assignment_id
          ? 'backup'
          : null
    if (!copy) continue
    out[i] = await endShardCopyLocked(tx, maxAttempts, locked, copy, { reason, error: l.error }, now)
  }
  return out.filter((o) => o !== null)
}

/** Ends every shard copy `workerId` runs, holder or backup (re-registration, docs/api.md §7). */
export async function requeueHeldShards(
  tx: PgTx,
  maxAttempts: number,
  workerId: string,
  { reason, error }: RequeueCause,
  now: number,
) {
  const held = (await tx.execute(sql`
    SELECT id, batch_id, worker_id, assignment_id FROM (
      SELECT id, batch_id, worker_id, assignment_id, seq FROM batch_shards
      WHERE worker_id = ${workerId} AND status = 'running'
      UNION ALL
      SELECT id, batch_id, backup_worker_id, backup_assignment_id, seq FROM batch_shards
      WHERE backup_worker_id = ${workerId} AND status = 'running') copies
    ORDER BY seq`)) as unknown as Omit<Lease, 'error'>[]
  return endLeases(
    tx,
    maxAttempts,
    held.map((h) => ({ ...h, error })),
    reason,
    now,
  )
}

/**
 * The sweeper: ends every running shard copy whose worker is silent, offline or gone — a shard's
 * holder first (its backup, if live, is promoted), then its backup.
 */
export async function requeueSilentShards(tx: PgTx, maxAttempts: number, cutoff: number, now: number) {
  const silent = (await tx.execute(sql`
    SELECT id, batch_id, worker_id, assignment_id FROM (
      SELECT s.id, s.batch_id, s.worker_id, s.assignment_id, s.seq, 0 AS copy
      FROM batch_shards s LEFT JOIN workers w ON w.id = s.worker_id
      WHERE s.status = 'running' AND (w.id IS NULL OR w.status = 'offline' OR w.last_seen_at <= ${cutoff})
      UNION ALL
      SELECT s.id, s.batch_id, s.backup_worker_id, s.backup_assignment_id, s.seq, 1
      FROM batch_shards s LEFT JOIN workers k ON k.id = s.backup_worker_id
      WHERE s.status = 'running' AND s.backup_worker_id IS NOT NULL
        AND (k.id IS NULL OR k.status = 'offline' OR k.last_seen_at <= ${cutoff})) copies
    ORDER BY seq, copy`)) as unknown as Omit<Lease, 'error'>[]
  return endLeases(
    tx,
    maxAttempts,
    silent.map((s) => ({ ...s, error: silentRequeue(s.worker_id).error })),
    SILENT_REASON,
    now,
  )
}

/**
 * A progress report of one copy of a shard (docs/api.md §7 counts, per shard and copy: each copy's
 * own counts never go down), in the caller's transaction; the batch's counts move by the change of
 * the shard's live counts (shardCounts: its copy furthest along).
 */
export async function recordShardProgress(
  tx: PgTx,
  p: {
    jobId: string
    workerId: string
    assignmentId?: string
    completed: number
    failed: number
    now: number
  },
  check: (held: { total: number; completed: number; failed: number }) => void,
) {
  const locked = heldShard(await lockShard(tx, p.jobId), p.workerId, p.assignmentId)
  const { holder, backup } = copiesOf(locked.shard)
  check({ total: locked.shard.requests, ...(locked.copy === 'holder' ? holder : backup!) })
  const counts = { completed: p.completed, failed: p.failed }
  const before = shardCounts(holder, backup)
  const after = locked.copy === 'holder' ? shardCounts(counts, backup) : shardCounts(holder, counts)
  await tx
    .update(batchShards)
    .set(
      locked.copy === 'holder'
        ? { request_counts_completed: p.completed, request_counts_failed: p.failed, updated_at: p.now }
        : {
            backup_request_counts_completed: p.completed,
            backup_request_counts_failed: p.failed,
            updated_at: p.now,
          },
    )
    .where(and(eq(batchShards.id, p.jobId), eq(batchShards.status, 'running')))
  await moveBatchCounts(tx, locked.batch.id, before, after, p.now)
}

/**
 * A shard's results recorded from one of its copies — the first complete upload wins (docs/api.md
 * §16); `last` when the batch has no work left (every request done).
 */
export async function recordShardResultsTx(tx: PgTx, r: DeliveredShard): Promise<ShardResultsRecorded> {
  const locked = heldShard(await lockShard(tx, r.shardId), r.workerId, r.assignmentId)
  const { shard } = locked
  const { holder, backup } = copiesOf(shard)
  const before = shardCounts(holder, backup)
  await tx
    .update(batchShards)
    .set({
      status: 'done',
      request_counts_completed: r.completed,
      request_counts_failed: r.failed,
      usage: r.usage,
      output_key: r.outputKey,
      error_key: r.errorKey,
      completed_at: r.now,
      updated_at: r.now,
      // The backup's upload came first: the two leases change places. The lease is now the copy
      // whose output the shard kept (usage by org counts its org), the backup columns the copy
      // that lost (its writes get 409).
      ...(locked.copy === 'backup'
        ? {
            backup_won: true,
            worker_id: shard.backup_worker_id,
            org_id: shard.backup_org_id,
            assignment_id: shard.backup_assignment_id,
            assigned_at: shard.backup_assigned_at,
            backup_worker_id: shard.worker_id,
            backup_org_id: shard.org_id,
            backup_assignment_id: shard.assignment_id,
            backup_assigned_at: shard.assigned_at,
            backup_request_counts_completed: holder.completed,
            backup_request_counts_failed: holder.failed,
          }
        : {}),
    })
    .where(and(eq(batchShards.id, r.shardId), eq(batchShards.status, 'running')))
  await moveBatchCounts(tx, locked.batch.id, before, r, r.now)
  const [batch] = (await tx.select().from(batches).where(eq(batches.id, locked.batch.id))) as BatchRow[]
  const [{ unfinished }] = (await tx.execute(sql`
    SELECT ${batch!.next_request < batch!.request_counts_total}::boolean
      OR EXISTS (SELECT FROM batch_shards WHERE batch_id = ${batch!.id} AND status <> 'done') AS unfinished`)) as unknown as [
    { unfinished: boolean },
  ]
  return {
    batch: batch!,
    last: !unfinished,
    backup: backup ? (locked.copy === 'backup' ? 'won' : 'lost') : null,
  }
}

// ---------------------------------------------------------------------------------------------
// Reads.

export async function shardWithBatch(db: PgDb, shardId: string) {
  const [row] = await db
    .select({ shard: batchShards, batch: batches })
    .from(batchShards)
    .innerJoin(batches, eq(batches.id, batchShards.batch_id))
    .where(eq(batchShards.id, shardId))
  return row ? { shard: row.shard as BatchShardRow, batch: row.batch as BatchRow } : null
}

/** The worker running a shard's backup copy (GET /v1/batches/{id}/shards backup_worker_name). */
const backupWorkers = alias(workers, 'backup_workers')

export async function shardsOf(db: PgDb, batchId: string) {
  const rows = await db
    .select({ shard: batchShards, worker_name: workers.name, backup_worker_name: backupWorkers.name })
    .from(batchShards)
    .leftJoin(workers, eq(workers.id, batchShards.worker_id))
    .leftJoin(backupWorkers, eq(backupWorkers.id, batchShards.backup_worker_id))
    .where(eq(batchShards.batch_id, batchId))
    .orderBy(asc(batchShards.first_request), asc(batchShards.shard_index))
  return rows.map((r) => ({
    ...(r.shard as BatchShardRow),
    worker_name: r.worker_name,
    backup_worker_name: r.backup_worker_name,
  }))
}

export async function shardStateCounts(db: PgDb, batchIds: string[]) {
  if (batchIds.length === 0) return []
  return db
    .select({ batch_id: batchShards.batch_id, status: batchShards.status, n: sql<number>`count(*)::int` })
    .from(batchShards)
    .where(inArray(batchShards.batch_id, batchIds))
    .groupBy(batchShards.batch_id, batchShards.status) as Promise<
    { batch_id: string; status: ShardState; n: number }[]
  >
}

/**
 * GET /metrics gridkeep_shards: waiting and running shards, and the done shards of batches still in
 * progress (finished batches' shards are history, not a gauge).
 */
export async function shardStates(db: PgDb) {
  const [row] = (await db.$client`
    SELECT (SELECT count(*) FROM batch_shards WHERE status = 'waiting')::int AS waiting,
      (SELECT count(*) FROM batch_shards WHERE status = 'running')::int AS running,
      (SELECT count(*) FROM batch_shards s JOIN batches b ON b.id = s.batch_id
        WHERE b.split AND b.status = 'in_progress' AND s.status = 'done')::int AS done`) as {
    waiting: number
    running: number
    done: number
  }[]
  return row!
}

/**
 * Where request lines [first, first + count) of the batch's execution order lie (lineSpansFrom): the
 * file order's byte range from the offsets (little-endian float64s, one per line: the start of line
 * `first`, and that of the line after the range, none past the last line: to the end of the file),
 * or the execution order's spans when there are any (docs/api.md §6).
 */
export async function lineSpans(db: PgDb, batchId: string, first: number, count: number) {
  const end = first + count
  const [row] = (await db.$client`
    SELECT CASE WHEN spans IS NULL THEN substring(offsets from ${first}::int * 8 + 1 for 8) END AS a,
      CASE WHEN spans IS NULL AND ${end}::int * 8 < length(offsets)
        THEN substring(offsets from ${end}::int * 8 + 1 for 8) END AS b,
      substring(spans from ${first}::int * ${SPAN_BYTES} + 1 for ${count}::int * ${SPAN_BYTES}) AS spans
    FROM batch_line_index WHERE batch_id = ${batchId}`) as {
    a: Uint8Array | null
    b: Uint8Array | null
    spans: Uint8Array | null
  }[]
  return row ? lineSpansFrom(row) : null
}
