import { and, asc, eq, sql } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { preparedOnce } from '../../db/prepared'
import { type BatchShardRow, batches, batchShards, workers } from '../../db/schema'
import { type RequeueOutcome, type RequeueReason, requeueDecision } from '../../domain/requeue'
import { checkShardHolder, nextShardSize, type ShardBounds, splittable } from '../../domain/shards'
import { silentRequeue } from '../../domain/sweep'
import { newId } from '../../lib/ids'
import type { ByteRange, DeliveredShard } from '../queue'
import type { SqliteDeps } from './deps'
import { transition } from './transition'

// Shards on SQLite (docs/api.md §16): the statements, and the verbs that run inside the queue's and the
// fleet's transactions. What to cut and when to requeue is decided in src/domain/shards.ts and the
// requeue rule; this file applies it.

const stmts = preparedOnce((db: Db) => {
  const id = sql.placeholder('id')
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
      },
      { id: string }
    >(
      `SELECT status, split, next_request, request_counts_total AS total, user_id,
         EXISTS (SELECT 1 FROM batch_line_index i WHERE i.batch_id = batches.id) AS indexed
       FROM batches WHERE id = $id`,
    ),
    waiting: db.$client.prepare<{ id: string }, { id: string }>(
      `SELECT id FROM batch_shards WHERE batch_id = $id AND status = 'waiting' ORDER BY shard_index LIMIT 1`,
    ),
    take: db
      .update(batchShards)
      .set({
        status: 'running',
        worker_id: sql.placeholder('worker_id') as never,
        org_id: sql.placeholder('org_id') as never,
        assignment_id: sql.placeholder('assignment_id') as never,
        assigned_at: sql.placeholder('now') as never,
        updated_at: sql.placeholder('now') as never,
      })
      .where(and(eq(batchShards.id, id), eq(batchShards.status, 'waiting')))
      .returning()
      .prepare(),
    cut: db
      .insert(batchShards)
      .values({
        id: sql.placeholder('id') as never,
        batch_id: sql.placeholder('batch_id') as never,
        user_id: sql.placeholder('user_id') as never,
        shard_index:
          sql`(SELECT count(*) FROM batch_shards WHERE batch_id = ${sql.placeholder('batch_id')})` as never,
        first_request: sql.placeholder('first') as never,
        requests: sql.placeholder('requests') as never,
        status: 'running',
        worker_id: sql.placeholder('worker_id') as never,
        org_id: sql.placeholder('org_id') as never,
        assignment_id: sql.placeholder('assignment_id') as never,
        assigned_at: sql.placeholder('now') as never,
        updated_at: sql.placeholder('now') as never,
      })
      .returning()
      .prepare(),
    advance: db.$client.prepare<unknown, { id: string; n: number; now: number }>(
      `UPDATE batches SET split = 1, next_request = next_request + $n, updated_at = $now WHERE id = $id`,
    ),
    batchRow: db.select().from(batches).where(eq(batches.id, id)).prepare(),
    shard: db.select().from(batchShards).where(eq(batchShards.id, id)).prepare(),
    holding: db.$client.prepare<
      {
        status: 'waiting' | 'running' | 'done'
        worker_id: string | null
        assignment_id: string | null
        batch_status: string
        batch_id: string
        requests: number
        completed: number
        failed: number
      },
      { id: string }
    >(
      `SELECT s.status, s.worker_id, s.assignment_id, b.status AS batch_status, s.batch_id, s.requests,
         s.request_counts_completed AS completed, s.request_counts_failed AS failed
       FROM batch_shards s JOIN batches b ON b.id = s.batch_id WHERE s.id = $id`,
    ),
    // Live counts (docs/api.md §16: the batch's are the sum over its shards): the shard's new counts,
    // and the batch's moved by the difference.
    shardCounts: db.$client.prepare<unknown, { id: string; completed: number; failed: number; now: number }>(
      `UPDATE batch_shards SET request_counts_completed = $completed, request_counts_failed = $failed,
         updated_at = $now WHERE id = $id`,
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
    unfinished: db.$client.prepare<{ n: number }, { id: string }>(
      `SELECT (SELECT next_request < request_counts_total FROM batches WHERE id = $id)
         OR EXISTS (SELECT 1 FROM batch_shards WHERE batch_id = $id AND status != 'done') AS n`,
    ),
    release: db.$client.prepare<unknown, { id: string; attempts: number; now: number }>(
      `UPDATE batch_shards SET status = 'waiting', attempts = $attempts, worker_id = NULL, org_id = NULL,
         assignment_id = NULL, assigned_at = NULL, request_counts_completed = 0,
         request_counts_failed = 0, updated_at = $now WHERE id = $id`,
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
    // and assignment stay, so a holder's later write hears 409 batch_not_in_progress, not 403.
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
    heldBy: db.$client.prepare<{ id: string }, { worker_id: string }>(
      `SELECT id FROM batch_shards WHERE worker_id = $worker_id AND status = 'running' ORDER BY seq`,
    ),
    silent: db.$client.prepare<{ id: string; worker_id: string | null }, { cutoff: number }>(
      `SELECT s.id, s.worker_id FROM batch_shards s LEFT JOIN workers w ON w.id = s.worker_id
       WHERE s.status = 'running' AND (w.id IS NULL OR w.status = 'offline' OR w.last_seen_at <= $cutoff)`,
    ),
    lineRange: db.$client.prepare<
      { a: Uint8Array | null; b: Uint8Array | null },
      { id: string; first: number; end: number }
    >(
      `SELECT substr(offsets, $first * 8 + 1, 8) AS a,
         CASE WHEN $end * 8 < length(offsets) THEN substr(offsets, $end * 8 + 1, 8) END AS b
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
    toJoin: db.$client.prepare<{ id: string }, []>(
      `SELECT id FROM batches WHERE split = 1 AND status = 'in_progress'
         AND next_request >= request_counts_total
         AND NOT EXISTS (SELECT 1 FROM batch_shards s WHERE s.batch_id = batches.id AND s.status != 'done')`,
    ),
    shardsOf: db
      .select({ shard: batchShards, worker_name: workers.name })
      .from(batchShards)
      .leftJoin(workers, eq(workers.id, batchShards.worker_id))
      .where(eq(batchShards.batch_id, id))
      .orderBy(asc(batchShards.shard_index))
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
    shard = s.cut.get({
      ...lease,
      id: newId('shard_'),
      batch_id: batchId,
      user_id: b.user_id,
      first: b.next_request,
      requests: size,
    })
    s.advance.run({ id: batchId, n: size, now: req.now })
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
 * Inside the caller's writeTx: one failed attempt of a running shard (the requeue rule, per shard:
 * docs/api.md §16). The shard waits again, offered before any new shard; the batch fails when the
 * shard's attempts are used up, goes back to validated when no other shard runs or is done, and
 * otherwise stays in_progress with its shards' highest attempts. Null for a stale caller.
 */
export function requeueShardInTx(
  deps: SqliteDeps,
  shardId: string,
  reason: RequeueReason,
  errorText: string,
  now: number,
): RequeueOutcome | null {
  const s = stmts(deps)
  const held = s.holding.get({ id: shardId })
  if (held?.status !== 'running' || held.batch_status !== 'in_progress') return null
  const shard = s.shard.get({ id: shardId })!
  const batch = s.batchRow.get({ id: held.batch_id })!
  const decision = requeueDecision(
    { ...batch, attempts: shard.attempts },
    deps.config.MAX_BATCH_ATTEMPTS,
    errorText,
    now,
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

/** Inside the caller's writeTx: requeues every shard `workerId` holds (re-registration). */
export function requeueHeldShardsInTx(
  deps: SqliteDeps,
  workerId: string,
  reason: RequeueReason,
  error: string,
  now: number,
): RequeueOutcome[] {
  const out: RequeueOutcome[] = []
  for (const { id } of stmts(deps).heldBy.all({ worker_id: workerId })) {
    const outcome = requeueShardInTx(deps, id, reason, error, now)
    if (outcome) out.push(outcome)
  }
  return out
}

/** Inside the sweeper's writeTx: requeues every running shard whose holder is silent or gone. */
export function requeueSilentShardsInTx(deps: SqliteDeps, cutoff: number, now: number) {
  const out: RequeueOutcome[] = []
  for (const o of stmts(deps).silent.all({ cutoff })) {
    const { reason, error } = silentRequeue(o.worker_id)
    const outcome = requeueShardInTx(deps, o.id, reason, error, now)
    if (outcome) out.push(outcome)
  }
  return out
}

/** Inside the caller's writeTx: a shard holder's progress report (docs/api.md §7 counts, per shard). */
export function recordShardProgressInTx(
  deps: SqliteDeps,
  p: { jobId: string; workerId: string; assignmentId?: string; now: number },
  check: (held: { total: number; completed: number; failed: number }) => void,
  counts: { completed: number; failed: number },
) {
  const s = stmts(deps)
  const held = checkShardHolder(s.holding.get({ id: p.jobId }), p.workerId, p.assignmentId)
  check({ total: held.requests, completed: held.completed, failed: held.failed })
  s.shardCounts.run({ id: p.jobId, ...counts, now: p.now })
  s.moveBatchCounts.run({
    id: held.batch_id,
    dc: counts.completed - held.completed,
    df: counts.failed - held.failed,
    now: p.now,
  })
}

/** Inside the caller's writeTx: a shard's results recorded; `last` when the batch has no work left. */
export function recordShardResultsInTx(deps: SqliteDeps, r: DeliveredShard) {
  const s = stmts(deps)
  const held = checkShardHolder(s.holding.get({ id: r.shardId }), r.workerId, r.assignmentId)
  s.shardCounts.run({ id: r.shardId, completed: r.completed, failed: r.failed, now: r.now })
  s.finish.run({
    id: r.shardId,
    usage: JSON.stringify(r.usage),
    output_key: r.outputKey,
    error_key: r.errorKey,
    now: r.now,
  })
  s.moveBatchCounts.run({
    id: held.batch_id,
    dc: r.completed - held.completed,
    df: r.failed - held.failed,
    now: r.now,
  })
  const last = !s.unfinished.get({ id: held.batch_id })!.n
  return { batch: s.batchRow.get({ id: held.batch_id })!, last }
}

/** The byte range of request lines [first, first + count) from the batch's index. */
export function lineRangeOf(
  deps: { db: Db },
  batchId: string,
  first: number,
  count: number,
): ByteRange | null {
  const row = stmts(deps).lineRange.get({ id: batchId, first, end: first + count })
  const at = (bytes: Uint8Array | null | undefined) =>
    bytes?.byteLength === 8 ? new DataView(bytes.buffer, bytes.byteOffset, 8).getFloat64(0, true) : null
  const start = at(row?.a)
  return start === null ? null : { start, end: at(row?.b) }
}
