import { and, asc, eq, sql } from 'drizzle-orm'
import { alias } from 'drizzle-orm/sqlite-core'
import type { Db } from '../../db/open'
import { placeholders, preparedOnce } from '../../db/prepared'
import { type BatchShardRow, batches, batchShards, workers } from '../../db/schema'
import { countsAttempt, type RequeueCause, type RequeueOutcome, requeueDecision } from '../../domain/requeue'
import {
  type BackupCandidate,
  type CutShard,
  checkShardHolder,
  copyEnded,
  nextShardSize,
  pickBackup,
  placeCut,
  type ShardBounds,
  type ShardCopy,
  shardCounts,
  splittable,
} from '../../domain/shards'
import { silentRequeue } from '../../domain/sweep'
import { newId } from '../../lib/ids'
import { lineSpansFrom, SPAN_BYTES } from '../batches'
import { type DeliveredShard, type LineSpans, type ShardResultsRecorded, takesNeeds } from '../queue'
import type { SqliteDeps } from './deps'
import { transition } from './transition'

// Shards on SQLite (docs/api.md §16): the statements, and the verbs that run inside the queue's and the
// fleet's transactions. What to cut and when to requeue is decided in src/domain/shards.ts and the
// requeue rule; this file applies it.

/** The worker running a shard's backup copy (GET /v1/batches/{id}/shards backup_worker_name). */
const backupWorkers = alias(workers, 'backup_workers')

/** A shard's copies and its batch's status, as the holding statement reads them. */
interface Holding {
  status: 'waiting' | 'running' | 'done'
  worker_id: string | null
  assignment_id: string | null
  backup_worker_id: string | null
  backup_assignment_id: string | null
  batch_status: string
  batch_id: string
  requests: number
  attempts: number
  completed: number
  failed: number
  backup_completed: number
  backup_failed: number
}

const stmts = preparedOnce((db: Db) => {
  const id = sql.placeholder('id')
  // A shard running on the polling worker: what a take of a waiting shard and a cut of a new one write.
  const running = {
    status: 'running' as const,
    ...placeholders(['worker_id', 'org_id', 'assignment_id'], { assigned_at: 'now', updated_at: 'now' }),
  }
  return {
    // Guided sizing: the online shard-capable workers hosting one of the model's runtime names.
    eligible: db.$client.prepare<{ n: number }, { names: string; cutoff: number }>(
      `SELECT count(DISTINCT w.id) AS n FROM worker_models m JOIN workers w ON w.id = m.worker_id
       WHERE m.name IN (SELECT value FROM json_each($names))
         AND w.shards = 1 AND w.status = 'online' AND w.last_seen_at > $cutoff`,
    ),
    // Split batches in progress with work left to hand out: a waiting shard, or requests not yet cut.
    openSplit: db.$client.prepare<
      { id: string; seq: number; user_id: string; needs: string },
      { model: string }
    >(
      `SELECT id, seq, user_id, needs FROM batches
       WHERE split = 1 AND status = 'in_progress' AND model = $model
         AND (next_request < request_counts_total
           OR EXISTS (SELECT 1 FROM batch_shards s WHERE s.batch_id = batches.id AND s.status = 'waiting'))`,
    ),
    claimable: db.$client.prepare<
      {
        status: string
        split: number
        next_request: number
        total: number
        indexed: number
        user_id: string
        ordered: number
      },
      { id: string }
    >(
      `SELECT status, split, next_request, request_counts_total AS total, user_id, ordered,
         EXISTS (SELECT 1 FROM batch_line_index i WHERE i.batch_id = batches.id) AS indexed
       FROM batches WHERE id = $id`,
    ),
    // docs/api.md §16 placeCut: the shards cut so far of a batch in an execution order of its own.
    cutShards: db.$client.prepare<CutShard, { id: string }>(
      `SELECT first_request, requests, worker_id, status, seq FROM batch_shards WHERE batch_id = $id`,
    ),
    waiting: db.$client.prepare<{ id: string }, { id: string }>(
      `SELECT id FROM batch_shards WHERE batch_id = $id AND status = 'waiting' ORDER BY shard_index LIMIT 1`,
    ),
    take: db
      .update(batchShards)
      .set(running)
      .where(and(eq(batchShards.id, id), eq(batchShards.status, 'waiting')))
      .returning()
      .prepare(),
    cut: db
      .insert(batchShards)
      .values({
        ...placeholders(['id', 'batch_id', 'user_id', 'requests'], { first_request: 'first' }),
        shard_index:
          sql`(SELECT count(*) FROM batch_shards WHERE batch_id = ${sql.placeholder('batch_id')})` as never,
        ...running,
      })
      .returning()
      .prepare(),
    advance: db.$client.prepare<unknown, { id: string; n: number; now: number }>(
      `UPDATE batches SET split = 1, next_request = next_request + $n, updated_at = $now WHERE id = $id`,
    ),
    batchRow: db.select().from(batches).where(eq(batches.id, id)).prepare(),
    shard: db.select().from(batchShards).where(eq(batchShards.id, id)).prepare(),
    holding: db.$client.prepare<Holding, { id: string }>(
      `SELECT s.status, s.worker_id, s.assignment_id, s.backup_worker_id, s.backup_assignment_id,
         b.status AS batch_status, s.batch_id, s.requests, s.attempts,
         s.request_counts_completed AS completed, s.request_counts_failed AS failed,
         s.backup_request_counts_completed AS backup_completed,
         s.backup_request_counts_failed AS backup_failed
       FROM batch_shards s JOIN batches b ON b.id = s.batch_id WHERE s.id = $id`,
    ),
    // Live counts (docs/api.md §16: the batch's are the sum over its shards): the shard's new counts,
    // and the batch's moved by the difference.
    shardCounts: db.$client.prepare<unknown, { id: string; completed: number; failed: number; now: number }>(
      `UPDATE batch_shards SET request_counts_completed = $completed, request_counts_failed = $failed,
         updated_at = $now WHERE id = $id`,
    ),
    // A backup copy's own live counts (docs/api.md §16).
    backupCounts: db.$client.prepare<unknown, { id: string; completed: number; failed: number; now: number }>(
      `UPDATE batch_shards SET backup_request_counts_completed = $completed,
         backup_request_counts_failed = $failed, updated_at = $now WHERE id = $id`,
    ),
    moveBatchCounts: db.$client.prepare<unknown, { id: string; dc: number; df: number; now: number }>(
      `UPDATE batches SET request_counts_completed = request_counts_completed + $dc,
         request_counts_failed = request_counts_failed + $df, updated_at = $now WHERE id = $id`,
    ),
    finish: db.$client.prepare<
      unknown,
      { id: string; usage: string; output_key: string | null; error_key: string | null; now: number }
    >(
      `UPDATE batch_shards SET status = 'done', usage = $usage, output_key = $output_key,
         error_key = $error_key, completed_at = $now, updated_at = $now WHERE id = $id`,
    ),
    // docs/api.md §16: the backup's upload came first. The shard is done with the backup's output,
    // and the two leases change places: the lease is now the copy whose output the shard kept (usage
    // by org counts its org), the backup columns the copy that lost (its writes get 409).
    finishByBackup: db.$client.prepare<
      unknown,
      {
        id: string
        completed: number
        failed: number
        usage: string
        output_key: string | null
        error_key: string | null
        now: number
      }
    >(
      `UPDATE batch_shards SET status = 'done', backup_won = 1,
         worker_id = backup_worker_id, org_id = backup_org_id, assignment_id = backup_assignment_id,
         assigned_at = backup_assigned_at,
         backup_worker_id = worker_id, backup_org_id = org_id, backup_assignment_id = assignment_id,
         backup_assigned_at = assigned_at,
         backup_request_counts_completed = request_counts_completed,
         backup_request_counts_failed = request_counts_failed,
         request_counts_completed = $completed, request_counts_failed = $failed,
         usage = $usage, output_key = $output_key, error_key = $error_key, completed_at = $now,
         updated_at = $now
       WHERE id = $id AND status = 'running'`,
    ),
    // docs/api.md §16: a backup copy handed out (pickBackup chose the shard).
    startBackup: db.$client.prepare<
      BatchShardRow,
      { id: string; worker_id: string; org_id: string; assignment_id: string; now: number }
    >(
      `UPDATE batch_shards SET backup_worker_id = $worker_id, backup_org_id = $org_id,
         backup_assignment_id = $assignment_id, backup_assigned_at = $now,
         backup_request_counts_completed = 0, backup_request_counts_failed = 0, backup_won = 0,
         updated_at = $now
       WHERE id = $id AND status = 'running' AND backup_worker_id IS NULL AND worker_id != $worker_id
       RETURNING *`,
    ),
    // The running shards of split batches in progress of the poll's models, with what pickBackup
    // reads of their batches (batches_split_model, then batch_shards_batch per batch).
    backupCandidates: db.$client.prepare<
      Omit<BackupCandidate, 'loaded' | 'batch_uncut' | 'batch_waiting'> & {
        batch_id: string
        model: string
        needs: string
        batch_uncut: number
        batch_waiting: number
      },
      { models: string }
    >(
      `SELECT s.id AS shard_id, s.seq, s.worker_id, s.assigned_at, s.attempts, s.backup_worker_id,
         s.batch_id, b.model, b.needs, b.next_request < b.request_counts_total AS batch_uncut,
         EXISTS (SELECT 1 FROM batch_shards w WHERE w.batch_id = b.id AND w.status = 'waiting') AS batch_waiting
       FROM batches b JOIN batch_shards s ON s.batch_id = b.id AND s.status = 'running'
       WHERE b.split = 1 AND b.status = 'in_progress' AND b.model IN (SELECT value FROM json_each($models))`,
    ),
    // docs/api.md §16: one copy ended while the other runs on (copyEnded). `promote`: the backup
    // becomes the holder, with its own counts; `drop`: the backup's lease and counts go.
    promoteBackup: db.$client.prepare<unknown, { id: string; lease: string; attempts: number; now: number }>(
      `UPDATE batch_shards SET worker_id = backup_worker_id, org_id = backup_org_id,
         assignment_id = backup_assignment_id, assigned_at = backup_assigned_at,
         request_counts_completed = backup_request_counts_completed,
         request_counts_failed = backup_request_counts_failed,
         backup_worker_id = NULL, backup_org_id = NULL, backup_assignment_id = NULL,
         backup_assigned_at = NULL, backup_request_counts_completed = 0, backup_request_counts_failed = 0,
         attempts = $attempts, updated_at = $now
       WHERE id = $id AND status = 'running' AND backup_assignment_id = $lease`,
    ),
    dropBackup: db.$client.prepare<unknown, { id: string; lease: string; attempts: number; now: number }>(
      `UPDATE batch_shards SET backup_worker_id = NULL, backup_org_id = NULL, backup_assignment_id = NULL,
         backup_assigned_at = NULL, backup_request_counts_completed = 0, backup_request_counts_failed = 0,
         attempts = $attempts, updated_at = $now
       WHERE id = $id AND status = 'running' AND backup_assignment_id = $lease`,
    ),
    // The batch of a shard one of whose copies ended: attempts are its shards' highest, the error
    // the last one, the live counts moved by the shard's difference.
    copyEndedOnBatch: db.$client.prepare<
      unknown,
      { id: string; attempts: number; error: string; dc: number; df: number; now: number }
    >(
      `UPDATE batches SET attempts = max(attempts, $attempts), error = $error,
         request_counts_completed = request_counts_completed + $dc,
         request_counts_failed = request_counts_failed + $df, updated_at = $now
       WHERE id = $id AND status = 'in_progress'`,
    ),
    unfinished: db.$client.prepare<{ n: number }, { id: string }>(
      `SELECT (SELECT next_request < request_counts_total FROM batches WHERE id = $id)
         OR EXISTS (SELECT 1 FROM batch_shards WHERE batch_id = $id AND status != 'done') AS n`,
    ),
    release: db.$client.prepare<unknown, { id: string; attempts: number; now: number }>(
      `UPDATE batch_shards SET status = 'waiting', attempts = $attempts, worker_id = NULL, org_id = NULL,
         assignment_id = NULL, assigned_at = NULL, request_counts_completed = 0,
         request_counts_failed = 0, backup_worker_id = NULL, backup_org_id = NULL,
         backup_assignment_id = NULL, backup_assigned_at = NULL, backup_request_counts_completed = 0,
         backup_request_counts_failed = 0, updated_at = $now WHERE id = $id`,
    ),
    active: db.$client.prepare<{ n: number }, { id: string }>(
      `SELECT count(*) AS n FROM batch_shards WHERE batch_id = $id AND status != 'waiting'`,
    ),
    // A shard requeued while others run or are done: the batch stays in_progress; its attempts
    // are its shards' highest, its error the last one, its counts lose the shard's.
    keepInProgress: db.$client.prepare<
      unknown,
      { id: string; attempts: number; error: string; dc: number; df: number; now: number }
    >(
      `UPDATE batches SET attempts = max(attempts, $attempts), error = $error,
         request_counts_completed = request_counts_completed - $dc,
         request_counts_failed = request_counts_failed - $df, updated_at = $now
       WHERE id = $id AND status = 'in_progress'`,
    ),
    // docs/api.md §16: a failed batch's other running shards hold nothing any more: they stop
    // counting toward their workers' max_concurrent_jobs and leave assigned_job_ids. Their holder
    // and assignment stay (and a backup's), so a later write hears 409 batch_not_in_progress, not 403.
    stopRunning: db.$client.prepare<unknown, { id: string; now: number }>(
      `UPDATE batch_shards SET status = 'waiting', updated_at = $now WHERE batch_id = $id AND status = 'running'`,
    ),
    // A batch's result parts: read, then cleared once joined or failed (the caller removes them).
    parts: db.$client.prepare<{ output_key: string | null; error_key: string | null }, { id: string }>(
      `SELECT output_key, error_key FROM batch_shards
       WHERE batch_id = $id AND (output_key IS NOT NULL OR error_key IS NOT NULL)`,
    ),
    clearParts: db.$client.prepare<unknown, { id: string }>(
      `UPDATE batch_shards SET output_key = NULL, error_key = NULL
       WHERE batch_id = $id AND (output_key IS NOT NULL OR error_key IS NOT NULL)`,
    ),
    // The running shards a worker holds or backs up (batch_shards_worker, batch_shards_backup).
    heldBy: db.$client.prepare<{ id: string }, { worker_id: string }>(
      `SELECT id, seq FROM batch_shards WHERE worker_id = $worker_id AND status = 'running'
       UNION SELECT id, seq FROM batch_shards WHERE backup_worker_id = $worker_id AND status = 'running'
       ORDER BY seq`,
    ),
    // Running shards with a copy whose worker is not live (domain/sweep.ts holderSilent): the
    // holder, the backup, or both (each flag says which).
    silent: db.$client.prepare<
      {
        id: string
        worker_id: string | null
        backup_worker_id: string | null
        holder_silent: number
        backup_silent: number
      },
      { cutoff: number }
    >(
      `SELECT * FROM (
         SELECT s.id, s.seq, s.worker_id, s.backup_worker_id,
           (w.id IS NULL OR w.status = 'offline' OR w.last_seen_at <= $cutoff) AS holder_silent,
           (s.backup_worker_id IS NOT NULL
             AND (k.id IS NULL OR k.status = 'offline' OR k.last_seen_at <= $cutoff)) AS backup_silent
         FROM batch_shards s LEFT JOIN workers w ON w.id = s.worker_id
           LEFT JOIN workers k ON k.id = s.backup_worker_id
         WHERE s.status = 'running')
       WHERE holder_silent OR backup_silent ORDER BY seq`,
    ),
    // The file order's byte range, or the execution order's spans (docs/api.md §6) when there are any.
    lineSpans: db.$client.prepare<
      { a: Uint8Array | null; b: Uint8Array | null; spans: Uint8Array | null },
      { id: string; first: number; end: number }
    >(
      `SELECT CASE WHEN spans IS NULL THEN substr(offsets, $first * 8 + 1, 8) END AS a,
         CASE WHEN spans IS NULL AND $end * 8 < length(offsets) THEN substr(offsets, $end * 8 + 1, 8) END AS b,
         substr(spans, $first * ${SPAN_BYTES} + 1, ($end - $first) * ${SPAN_BYTES}) AS spans
       FROM batch_line_index WHERE batch_id = $id`,
    ),
    tallies: db.$client.prepare<
      { batch_id: string; status: 'waiting' | 'running' | 'done'; n: number },
      { ids: string }
    >(
      `SELECT batch_id, status, count(*) AS n FROM batch_shards
       WHERE batch_id IN (SELECT value FROM json_each($ids)) GROUP BY batch_id, status`,
    ),
    // GET /metrics: waiting and running shards (index ranges), and the done shards of batches still
    // in progress (finished batches' shards are history, not a gauge).
    states: db.$client.prepare<{ waiting: number; running: number; done: number }, []>(
      `SELECT (SELECT count(*) FROM batch_shards WHERE status = 'waiting') AS waiting,
         (SELECT count(*) FROM batch_shards WHERE status = 'running') AS running,
         (SELECT count(*) FROM batch_shards s JOIN batches b ON b.id = s.batch_id
           WHERE b.split = 1 AND b.status = 'in_progress' AND s.status = 'done') AS done`,
    ),
    shardsOf: db
      .select({ shard: batchShards, worker_name: workers.name, backup_worker_name: backupWorkers.name })
      .from(batchShards)
      .leftJoin(workers, eq(workers.id, batchShards.worker_id))
      .leftJoin(backupWorkers, eq(backupWorkers.id, batchShards.backup_worker_id))
      .where(eq(batchShards.batch_id, id))
      .orderBy(asc(batchShards.first_request), asc(batchShards.shard_index))
      .prepare(),
  }
})

export const shardStatements = stmts

/** Split batches with work left for a shard-capable worker to take, for the claim's heads. */
export function openSplitHeads(deps: { db: Db }, model: string) {
  return stmts(deps).openSplit.all({ model })
}

/**
 * Inside the claim's transaction: hands `batchId` out as a shard when it is split or splittable
 * (a requeued shard first, then the next cut by guided sizing), moving a validated batch to
 * in_progress. Undefined when the batch runs whole (the caller claims it whole).
 */
export function claimShardInTx(
  deps: SqliteDeps,
  batchId: string,
  req: { workerId: string; orgId: string; now: number; bounds: ShardBounds; cutoff: number },
  names: readonly string[],
): { shard: BatchShardRow; batch: typeof batches.$inferSelect } | null | undefined {
  const s = stmts(deps)
  const b = s.claimable.get({ id: batchId })
  if (!b) return null
  if (!b.split && (b.status !== 'validated' || !splittable(b.total, req.bounds, b.indexed === 1)))
    return undefined
  const lease = {
    worker_id: req.workerId,
    org_id: req.orgId,
    assignment_id: newId('asg_'),
    now: req.now,
  }
  const waiting = s.waiting.get({ id: batchId })
  let shard: BatchShardRow | undefined
  if (waiting) {
    shard = s.take.get({ ...lease, id: waiting.id })
  } else {
    const unclaimed = b.total - b.next_request
    if (unclaimed <= 0) return null
    const eligible = s.eligible.get({ names: JSON.stringify(names), cutoff: req.cutoff })?.n ?? 1
    const size = nextShardSize(unclaimed, eligible, req.bounds)
    // In the file order the cuts follow one another; in an execution order of its own (docs/api.md
    // §6) each worker continues its prefix groups (placeCut).
    const place = b.ordered
      ? placeCut(s.cutShards.all({ id: batchId }), b.total, req.workerId, size)
      : { first: b.next_request, requests: size }
    if (!place) return null
    shard = s.cut.get({
      ...lease,
      id: newId('shard_'),
      batch_id: batchId,
      user_id: b.user_id,
      first: place.first,
      requests: place.requests,
    })
    s.advance.run({ id: batchId, n: place.requests, now: req.now })
  }
  if (!shard) return null
  const batch =
    b.status === 'validated'
      ? transition(deps, batchId, 'claimed', req.now, { in_progress_at: req.now }, `worker ${req.workerId}`)
      : s.batchRow.get({ id: batchId })
  if (!batch) return null
  return { shard, batch }
}

/**
 * Inside the caller's writeTx: one failed attempt of a running shard with no other copy, `held` as
 * the holding statement read it, running in its in_progress batch (the requeue rule, per shard:
 * docs/api.md §16). The shard waits again, offered before any new shard; the batch fails when the
 * shard's attempts are used up, goes back to validated when no other shard runs or is done, and
 * otherwise stays in_progress with its shards' highest attempts. Null for a stale caller.
 */
function requeueShardInTx(
  deps: SqliteDeps,
  shardId: string,
  held: Holding,
  { reason, error }: RequeueCause,
  now: number,
): RequeueOutcome | null {
  const s = stmts(deps)
  const batch = s.batchRow.get({ id: held.batch_id })!
  const decision = requeueDecision(
    { ...batch, attempts: held.attempts },
    deps.config.MAX_BATCH_ATTEMPTS,
    error,
    now,
    countsAttempt(reason),
  )
  const attempts = Math.max(batch.attempts, decision.changes.attempts)
  s.release.run({ id: shardId, attempts: decision.changes.attempts, now })
  if (decision.event === 'attempts_exhausted' || s.active.get({ id: batch.id })!.n === 0) {
    const row = transition(deps, batch.id, decision.event, now, { ...decision.changes, attempts }, reason)
    if (!row) return null
    if (decision.event === 'attempts_exhausted') {
      s.stopRunning.run({ id: batch.id, now })
      return { ...decision.outcome, parts: takePartsInTx(deps, batch.id) }
    }
  } else {
    s.keepInProgress.run({
      id: batch.id,
      attempts,
      error: decision.changes.error,
      dc: held.completed,
      df: held.failed,
      now,
    })
  }
  return decision.outcome
}

/** Inside the caller's writeTx: the blob keys of a batch's result parts, cleared from its shards. */
export function takePartsInTx(deps: { db: Db }, batchId: string): string[] {
  const s = stmts(deps)
  const keys = s.parts.all({ id: batchId }).flatMap((p) => [p.output_key, p.error_key])
  s.clearParts.run({ id: batchId })
  return keys.filter((k): k is string => k !== null)
}

/** A shard's copies' own counts, as the holding statement reads them. */
const countsOf = (h: {
  completed: number
  failed: number
  backup_completed: number
  backup_failed: number
}) => ({
  holder: { completed: h.completed, failed: h.failed },
  backup: { completed: h.backup_completed, failed: h.backup_failed },
})

/**
 * Inside the caller's writeTx: one copy of a running shard ended without results (report-failure,
 * a silent worker, re-registration), by copyEnded (docs/api.md §16): the shard's only copy is requeued
 * (requeueShardInTx); otherwise the other copy carries on — promoted to holder, or the holder left
 * alone — with one attempt counted and the error stored. Null for a stale caller.
 */
export function endShardCopyInTx(
  deps: SqliteDeps,
  shardId: string,
  copy: ShardCopy,
  cause: RequeueCause,
  now: number,
): RequeueOutcome | null {
  const s = stmts(deps)
  const held = s.holding.get({ id: shardId })
  if (held?.status !== 'running' || held.batch_status !== 'in_progress') return null
  const plan = copyEnded(held, copy, cause.error, countsAttempt(cause.reason))
  if (plan.kind === 'requeue') return requeueShardInTx(deps, shardId, held, cause, now)
  const { holder, backup } = countsOf(held)
  const before = shardCounts(holder, backup)
  const after = plan.kind === 'promote' ? backup : holder
  const step = plan.kind === 'promote' ? s.promoteBackup : s.dropBackup
  step.run({ id: shardId, lease: held.backup_assignment_id!, attempts: plan.attempts, now })
  s.copyEndedOnBatch.run({
    id: held.batch_id,
    attempts: plan.attempts,
    error: plan.error,
    dc: after.completed - before.completed,
    df: after.failed - before.failed,
    now,
  })
  const batch = s.batchRow.get({ id: held.batch_id })!
  return {
    status: 'validated',
    batch_id: batch.id,
    attempts: plan.attempts,
    error: plan.error,
    model: batch.model,
    backup: plan.kind === 'promote' ? 'promoted' : 'failed',
  }
}

/** Inside the caller's writeTx: the copy of `shardId` that `workerId` runs ends (null: none any more). */
function endWorkersCopyInTx(
  deps: SqliteDeps,
  shardId: string,
  workerId: string | null,
  cause: RequeueCause,
  now: number,
) {
  const held = stmts(deps).holding.get({ id: shardId })
  const copy: ShardCopy | null =
    held?.worker_id === workerId ? 'holder' : held?.backup_worker_id === workerId ? 'backup' : null
  return copy ? endShardCopyInTx(deps, shardId, copy, cause, now) : null
}

/** Inside the caller's writeTx: ends every shard copy `workerId` runs, holder or backup (re-registration). */
export function requeueHeldShardsInTx(deps: SqliteDeps, workerId: string, cause: RequeueCause, now: number) {
  const out: RequeueOutcome[] = []
  for (const { id } of stmts(deps).heldBy.all({ worker_id: workerId })) {
    const outcome = endWorkersCopyInTx(deps, id, workerId, cause, now)
    if (outcome) out.push(outcome)
  }
  return out
}

/**
 * Inside the sweeper's writeTx: ends every running shard copy whose worker is silent or gone — the
 * holder's first (its backup, if live, is promoted), then the backup's.
 */
export function requeueSilentShardsInTx(deps: SqliteDeps, cutoff: number, now: number) {
  const out: RequeueOutcome[] = []
  for (const o of stmts(deps).silent.all({ cutoff })) {
    const ended = [
      o.holder_silent ? o.worker_id : undefined,
      o.backup_silent ? o.backup_worker_id : undefined,
    ]
    for (const workerId of ended) {
      if (workerId === undefined) continue
      const outcome = endWorkersCopyInTx(deps, o.id, workerId, silentRequeue(workerId), now)
      if (outcome) out.push(outcome)
    }
  }
  return out
}

/**
 * Inside the claim's transaction (docs/api.md §16 backup copies): when nothing else was claimable, a
 * backup copy of the shard pickBackup chooses among the running shards of `models`' split batches
 * whose needs the worker meets (docs/api.md §7 Poll rule 7). Null when there is none.
 */
export function claimBackupInTx(
  deps: SqliteDeps,
  req: { workerId: string; orgId: string; now: number },
  models: ReadonlyMap<string, { loaded: boolean; needs?: readonly string[] }>,
): { shard: BatchShardRow; batch: typeof batches.$inferSelect } | null {
  const s = stmts(deps)
  const candidates = s.backupCandidates
    .all({ models: JSON.stringify([...models.keys()]) })
    .filter((c) => takesNeeds(models.get(c.model)!).includes(c.needs))
    .map((c) => ({
      ...c,
      batch_uncut: c.batch_uncut === 1,
      batch_waiting: c.batch_waiting === 1,
      loaded: models.get(c.model)?.loaded ?? false,
    }))
  const pick = pickBackup(candidates, req.workerId, deps.config.MAX_BATCH_ATTEMPTS)
  if (!pick) return null
  const shard = s.startBackup.get({
    id: pick.shard_id,
    worker_id: req.workerId,
    org_id: req.orgId,
    assignment_id: newId('asg_'),
    now: req.now,
  })
  if (!shard) return null
  return { shard: s.shard.get({ id: shard.id })!, batch: s.batchRow.get({ id: pick.batch_id })! }
}

/**
 * Inside the caller's writeTx: a progress report of one copy of a shard (docs/api.md §7 counts, per
 * shard and copy: each copy's own counts never go down); the batch's counts move by the change of
 * the shard's live counts (shardCounts: its copy furthest along).
 */
export function recordShardProgressInTx(
  deps: SqliteDeps,
  p: { jobId: string; workerId: string; assignmentId?: string; now: number },
  check: (held: { total: number; completed: number; failed: number }) => void,
  counts: { completed: number; failed: number },
) {
  const s = stmts(deps)
  const held = checkShardHolder(s.holding.get({ id: p.jobId }), p.workerId, p.assignmentId)
  const { holder, backup } = countsOf(held)
  const hasBackup = held.backup_assignment_id !== null
  check({ total: held.requests, ...(held.copy === 'holder' ? holder : backup) })
  const before = shardCounts(holder, hasBackup ? backup : null)
  const after =
    held.copy === 'holder' ? shardCounts(counts, hasBackup ? backup : null) : shardCounts(holder, counts)
  const update = held.copy === 'holder' ? s.shardCounts : s.backupCounts
  update.run({ id: p.jobId, ...counts, now: p.now })
  s.moveBatchCounts.run({
    id: held.batch_id,
    dc: after.completed - before.completed,
    df: after.failed - before.failed,
    now: p.now,
  })
}

/**
 * Inside the caller's writeTx: a shard's results recorded from one of its copies — the first
 * complete upload wins (docs/api.md §16) — and `last` when the batch has no work left.
 */
export function recordShardResultsInTx(deps: SqliteDeps, r: DeliveredShard): ShardResultsRecorded {
  const s = stmts(deps)
  const held = checkShardHolder(s.holding.get({ id: r.shardId }), r.workerId, r.assignmentId)
  const hasBackup = held.backup_assignment_id !== null
  const { holder, backup } = countsOf(held)
  const before = shardCounts(holder, hasBackup ? backup : null)
  const results = {
    id: r.shardId,
    usage: JSON.stringify(r.usage),
    output_key: r.outputKey,
    error_key: r.errorKey,
    now: r.now,
  }
  if (held.copy === 'backup') {
    s.finishByBackup.run({ ...results, completed: r.completed, failed: r.failed })
  } else {
    s.shardCounts.run({ id: r.shardId, completed: r.completed, failed: r.failed, now: r.now })
    s.finish.run(results)
  }
  s.moveBatchCounts.run({
    id: held.batch_id,
    dc: r.completed - before.completed,
    df: r.failed - before.failed,
    now: r.now,
  })
  const last = !s.unfinished.get({ id: held.batch_id })!.n
  return {
    batch: s.batchRow.get({ id: held.batch_id })!,
    last,
    backup: hasBackup ? (held.copy === 'backup' ? 'won' : 'lost') : null,
  }
}

/** Where request lines [first, first + count) of the batch's execution order lie, from its index. */
export function lineSpansOf(
  deps: { db: Db },
  batchId: string,
  first: number,
  count: number,
): LineSpans | null {
  const row = stmts(deps).lineSpans.get({ id: batchId, first, end: first + count })
  return row ? lineSpansFrom(row) : null
}
