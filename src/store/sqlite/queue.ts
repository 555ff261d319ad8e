import { and, eq, inArray, isNull, sql } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { placeholders, preparedOnce } from '../../db/prepared'
import { batchAssignments, batches, files, modelPulls, workers } from '../../db/schema'
import { writeTx } from '../../db/tx'
import { placeHeads, slugsToAge } from '../../domain/placement'
import { countsAttempt, type RequeueCause, type RequeueOutcome, requeueDecision } from '../../domain/requeue'
import { checkShardHolder, isShardId, type ShardState, tallyShards } from '../../domain/shards'
import { SILENT_REASON, silentRequeue } from '../../domain/sweep'
import { checkHolder, ownersToCount, pickClaim } from '../../domain/worker-rules'
import { forbidden } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { type Claimed, type ClaimRequest, type QueueStore, type SweepOutcome, takesNeeds } from '../queue'
import { goesOfflineWhere, holdingColumns, orphanedBatch } from '../statements'
import type { SqliteDeps } from './deps'
import { sqliteJoins } from './joins'
import {
  claimBackupInTx,
  claimShardInTx,
  endShardCopyInTx,
  lineSpansOf,
  openSplitHeads,
  recordShardResultsInTx,
  requeueHeldShardsInTx,
  requeueSilentShardsInTx,
  shardStatements,
} from './shards'
import { transition } from './transition'

// The work queue on SQLite: each verb is one synchronous BEGIN IMMEDIATE transaction on
// bun:sqlite (ARCHITECTURE.md rule 8), its statements prepared once per database. One process owns the
// database (src/ops/instance-lock.ts), so maintenance needs no shared lease.
//
// `col = +$param` in the claim's statements: with a bare parameter compared to a column of a
// multi-column index, each run cost 9–14 µs instead of 1–2 with the SQLite 3.54 of Bun 1.4 (measured;
// more than preparing the statement anew costs, so not a re-prepare — the cause is not known). Behind
// a unary + the comparison (the column's TEXT affinity) and the plan (EXPLAIN QUERY PLAN) are the same.

const stmts = preparedOnce((db: Db) => ({
  // docs/api.md §7 max_concurrent_jobs, counting held shards and backup copies too (docs/api.md §16).
  // A worker removed since its poll began (docs/api.md §3) claims nothing: it counts as full.
  activeCount: db.$client.prepare<{ n: number }, { worker_id: string }>(
    `SELECT CASE WHEN EXISTS (SELECT 1 FROM workers WHERE id = +$worker_id) THEN
         (SELECT count(*) FROM batch_assignments WHERE worker_id = +$worker_id AND completed_at IS NULL)
       + (SELECT count(*) FROM batch_shards WHERE worker_id = +$worker_id AND status = 'running')
       + (SELECT count(*) FROM batch_shards WHERE backup_worker_id = +$worker_id AND status = 'running')
       ELSE 1e9 END AS n`,
  ),
  // The first needs value after `after` among one model's validated batches (docs/api.md §7 Poll
  // rule 7): stepping it walks the needs values present, one index probe each, so a claim probes
  // only the needs that batches really have, not every set a worker's capabilities could cover.
  nextNeeds: db.$client.prepare<{ needs: string }, { model: string; after: string }>(
    `SELECT needs FROM batches INDEXED BY batches_status_model
     WHERE status = 'validated' AND model = +$model AND needs > $after
     ORDER BY needs LIMIT 1`,
  ),
  // Poll (docs/api.md §14): the oldest validated batch of the first owner after `after` waiting for one
  // model with one set of needs (docs/api.md §7 Poll rule 7): one probe of the (status, model, needs,
  // user_id, seq) index. Stepping `after` from owner to owner walks the owners (a skip scan): the
  // cost follows the owners waiting, never the queue — batches whose needs the worker cannot meet
  // are never stepped over. INDEXED BY: batches_status_user also matches the WHERE, and a range of
  // it is the whole queue.
  nextOwnerHead: db.$client.prepare<
    { id: string; seq: number; user_id: string },
    { model: string; needs: string; after: string }
  >(
    `SELECT id, seq, user_id FROM batches INDEXED BY batches_status_model
     WHERE status = 'validated' AND model = +$model AND needs = +$needs AND user_id > $after
     ORDER BY user_id, seq LIMIT 1`,
  ),
  // The same for a worker that takes whole batches only (docs/api.md §16): a split batch is not for it.
  nextOwnerHeadWhole: db.$client.prepare<
    { id: string; seq: number; user_id: string },
    { model: string; needs: string; after: string }
  >(
    `SELECT id, seq, user_id FROM batches INDEXED BY batches_status_model
     WHERE status = 'validated' AND model = +$model AND needs = +$needs AND user_id > $after AND split = 0
     ORDER BY user_id, seq LIMIT 1`,
  ),
  // GET /metrics: the waiting batches per owner (batches_status_user), each owner running or not.
  queuedByOwnerClass: db.$client.prepare<{ running: number; n: number }, []>(
    `SELECT q.user_id IN (SELECT user_id FROM batches WHERE status = 'in_progress') AS running,
       sum(q.n) AS n
     FROM (SELECT user_id, count(*) AS n FROM batches WHERE status = 'validated' GROUP BY user_id) q
     GROUP BY 1`,
  ),
  // docs/api.md §14: how much each of the owners has in progress — whole batches, and held shards of
  // split ones with their backup copies (docs/api.md §16) — one range of batches_status_user and of
  // batch_shards_user per owner.
  running: db.$client.prepare<{ user_id: string; n: number }, { owners: string }>(
    `SELECT user_id, sum(n) AS n FROM (
       SELECT user_id, count(*) AS n FROM batches INDEXED BY batches_status_user
       WHERE status = 'in_progress' AND split = 0 AND user_id IN (SELECT value FROM json_each($owners))
       GROUP BY user_id
       UNION ALL
       SELECT user_id, count(*) + count(backup_worker_id) AS n FROM batch_shards
       WHERE status = 'running' AND user_id IN (SELECT value FROM json_each($owners))
       GROUP BY user_id)
     GROUP BY user_id`,
  ),
  // docs/api.md §7 placement: a model's longest-waiting batch, one probe of batches_waiting.
  oldestWaiting: db.$client.prepare<{ at: number | null }, { model: string }>(
    `SELECT min(queued_at) AS at FROM batches INDEXED BY batches_waiting
     WHERE status = 'validated' AND queued_at IS NOT NULL AND model = +$model`,
  ),
  // docs/api.md §7 placement: the work waiting per model — validated batches (index-only on
  // batches_validated_model), the uncut rest of split batches in progress (batches_split_model) and
  // their requeued shards.
  waitingWork: db.$client.prepare<{ model: string; requests: number }, []>(
    `SELECT model, sum(requests) AS requests FROM (
       SELECT model, sum(request_counts_total) AS requests
       FROM batches INDEXED BY batches_validated_model WHERE status = 'validated' GROUP BY model
       UNION ALL
       SELECT model, sum(request_counts_total - next_request)
       FROM batches INDEXED BY batches_split_model WHERE split = 1 AND status = 'in_progress' GROUP BY model
       UNION ALL
       SELECT b.model, sum(s.requests) FROM batch_shards s JOIN batches b ON b.id = s.batch_id
       WHERE s.status = 'waiting' AND b.status = 'in_progress' GROUP BY b.model)
     WHERE model IS NOT NULL GROUP BY model`,
  ),
  insertAssignment: db
    .insert(batchAssignments)
    .values(placeholders(['id', 'batch_id', 'worker_id', 'org_id'], { assigned_at: 'now' }))
    .prepare(),
  batch: db
    .select({
      id: batches.id,
      status: batches.status,
      attempts: batches.attempts,
      request_counts_total: batches.request_counts_total,
      model: batches.model,
    })
    .from(batches)
    .where(eq(batches.id, sql.placeholder('id')))
    .prepare(),
  dropAssignment: db
    .delete(batchAssignments)
    .where(eq(batchAssignments.batch_id, sql.placeholder('id')))
    .prepare(),
  // The batch a worker says it works on, with its current assignment (if any).
  holding: db
    .select(holdingColumns(batches, batchAssignments))
    .from(batches)
    .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
    .where(eq(batches.id, sql.placeholder('id')))
    .prepare(),
  held: db
    .select({ batch_id: batchAssignments.batch_id })
    .from(batchAssignments)
    .where(and(eq(batchAssignments.worker_id, sql.placeholder('id')), isNull(batchAssignments.completed_at)))
    .orderBy(batchAssignments.seq)
    .prepare(),
}))

/** The batch a worker says it works on, with its current assignment (if any): what the holder rule reads. */
export function holdingOf(deps: SqliteDeps, batchId: string) {
  return stmts(deps).holding.get({ id: batchId })
}

/**
 * Inside the caller's writeTx: one failed attempt of an in_progress batch (the requeue rule; none
 * for a removed worker), its assignment deleted. Null when the batch is not in_progress (a stale caller changes nothing).
 */
export function requeueInTx(
  deps: SqliteDeps,
  batchId: string,
  { reason, error }: RequeueCause,
  now: number,
): RequeueOutcome | null {
  const s = stmts(deps)
  const batch = s.batch.get({ id: batchId })
  if (batch?.status !== 'in_progress') return null
  const decision = requeueDecision(batch, deps.config.MAX_BATCH_ATTEMPTS, error, now, countsAttempt(reason))
  s.dropAssignment.run({ id: batchId })
  if (!transition(deps, batchId, decision.event, now, decision.changes, reason)) return null
  return decision.outcome
}

/** Inside the caller's writeTx: requeues every batch `workerId` still holds (re-registration, removal). */
export function requeueHeldInTx(deps: SqliteDeps, workerId: string, cause: RequeueCause, now: number) {
  const out: RequeueOutcome[] = []
  for (const a of stmts(deps).held.all({ id: workerId })) {
    const outcome = requeueInTx(deps, a.batch_id, cause, now)
    if (outcome) out.push(outcome)
  }
  out.push(...requeueHeldShardsInTx(deps, workerId, cause, now))
  return out
}

/**
 * The needs values of `takes` that validated batches of `model` have: '' (needs nothing) always
 * when the worker takes it (its owner walk finds out), then every other value present, stepped one
 * index probe at a time; most queues hold one or two values, whatever a worker could take.
 */
function presentNeeds(s: ReturnType<typeof stmts>, model: string, takes: readonly string[]): string[] {
  const out = takes.includes('') ? [''] : []
  if (takes.length <= 1) return takes.length === 1 && takes[0] !== '' ? [takes[0]!] : out
  for (let r = s.nextNeeds.get({ model, after: '' }); r; r = s.nextNeeds.get({ model, after: r.needs }))
    if (takes.includes(r.needs)) out.push(r.needs)
  return out
}

export function sqliteQueue(deps: SqliteDeps): QueueStore {
  const { db } = deps
  const lastRun = new Map<string, number>()
  return {
    async claim<M>(req: ClaimRequest<M>): Promise<Claimed<M> | null> {
      const s = stmts(deps)
      const next = req.shards ? s.nextOwnerHead : s.nextOwnerHeadWhole
      return writeTx(deps.db, () => {
        if (s.activeCount.get({ worker_id: req.workerId })!.n >= req.maxConcurrent) return null
        const heads = []
        for (const c of req.candidates) {
          const head = (b: { id: string; seq: number; user_id: string }) => ({
            batch_id: b.id,
            seq: b.seq,
            user_id: b.user_id,
            rank: 0,
            running: 0,
            candidate: c,
          })
          const takes = takesNeeds(c)
          for (const needs of presentNeeds(s, c.model, takes)) {
            for (let b = next.get({ model: c.model, needs, after: '' }); b; ) {
              heads.push(head(b))
              b = next.get({ model: c.model, needs, after: b.user_id })
            }
          }
          // docs/api.md §16: split batches in progress with shards left join the choice.
          if (req.shards)
            for (const b of openSplitHeads(deps, c.model)) if (takes.includes(b.needs)) heads.push(head(b))
        }
        // docs/api.md §7 placement: the models ranked (the longest waits the ranking reads, read here, fresh).
        const oldest = new Map<string, number | null>()
        for (const model of slugsToAge(req.placement, heads))
          oldest.set(model, s.oldestWaiting.get({ model })?.at ?? null)
        const placed = placeHeads(req.placement, heads, oldest, req.now)
        const owners = ownersToCount(placed)
        if (owners.length) {
          const running = new Map(
            s.running.all({ owners: JSON.stringify(owners) }).map((r) => [r.user_id, r.n]),
          )
          for (const h of placed) h.running = running.get(h.user_id) ?? 0
        }
        const best = pickClaim(placed)
        if (!best) {
          // docs/api.md §16 backup copies: the lowest priority of a claim, when nothing else is.
          if (!req.shards?.backups) return null
          const byModel = new Map(req.candidates.map((c) => [c.model, c]))
          const copy = claimBackupInTx(deps, req, byModel)
          if (!copy) return null
          const match = byModel.get(copy.batch.model!)!.match
          return { ...copy, assignmentId: copy.shard.backup_assignment_id!, match, backup: true }
        }
        const match = best.candidate.match
        if (req.shards) {
          const split = claimShardInTx(
            deps,
            best.batch_id,
            { workerId: req.workerId, orgId: req.orgId, now: req.now, ...req.shards },
            best.candidate.names ?? [],
          )
          if (split === null) return null
          if (split) return { ...split, assignmentId: split.shard.assignment_id!, match, backup: false }
        }
        const batch = transition(
          deps,
          best.batch_id,
          'claimed',
          req.now,
          { in_progress_at: req.now },
          `worker ${req.workerId}`,
        )
        if (!batch) return null
        const assignmentId = newId('asg_')
        s.insertAssignment.run({
          id: assignmentId,
          batch_id: batch.id,
          worker_id: req.workerId,
          org_id: req.orgId,
          now: req.now,
        })
        return { batch, assignmentId, match, shard: null, backup: false }
      })
    },

    async batchWithAssignment(batchId) {
      return {
        batch: db.select().from(batches).where(eq(batches.id, batchId)).get() ?? null,
        assignment:
          db.select().from(batchAssignments).where(eq(batchAssignments.batch_id, batchId)).get() ?? null,
      }
    },

    async recordResults(r) {
      return writeTx(db, (tx) => {
        checkHolder(holdingOf(deps, r.batchId), r.workerId, r.assignmentId)
        const row = transition(deps, r.batchId, 'results_delivered', r.now, r.changes, `worker ${r.workerId}`)
        if (!row) throw forbidden('not_assigned', 'This batch is not assigned to this worker')
        tx.update(batchAssignments)
          .set({ completed_at: r.now })
          .where(eq(batchAssignments.batch_id, r.batchId))
          .run()
        if (r.files.length) tx.insert(files).values(r.files).run()
        return row
      })
    },

    async reportFailure(r) {
      const cause = { reason: 'reported_failure', error: r.error } as const
      return writeTx(deps.db, () => {
        if (isShardId(r.jobId)) {
          const s = shardStatements(deps)
          const held = checkShardHolder(s.holding.get({ id: r.jobId }), r.workerId, r.assignmentId)
          // Seen running, its batch in_progress, by the holder rule: this copy ends.
          return endShardCopyInTx(deps, r.jobId, held.copy, cause, r.now)!
        }
        checkHolder(holdingOf(deps, r.jobId), r.workerId, r.assignmentId)
        // The holder rule saw the batch in_progress inside this transaction: the requeue happens.
        return requeueInTx(deps, r.jobId, cause, r.now)!
      })
    },

    async sweep(now: number, cutoff: number): Promise<SweepOutcome> {
      return writeTx(deps.db, (tx) => {
        const workers_offline = tx
          .update(workers)
          .set({ status: 'offline' })
          .where(goesOfflineWhere(workers, cutoff))
          .returning({ id: workers.id })
          .all()
          .map((w) => w.id)
        // Every in_progress batch whose holder is not live: silent, offline, or no longer there.
        const orphans = tx
          .select({ batch_id: batches.id, worker_id: batchAssignments.worker_id })
          .from(batches)
          .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
          .leftJoin(workers, eq(workers.id, batchAssignments.worker_id))
          .where(orphanedBatch(batches, workers, cutoff))
          .all()
        const requeues: SweepOutcome['requeues'] = []
        for (const o of orphans) {
          const cause = silentRequeue(o.worker_id)
          const outcome = requeueInTx(deps, o.batch_id, cause, now)
          if (outcome) requeues.push({ ...outcome, reason: cause.reason })
        }
        for (const outcome of requeueSilentShardsInTx(deps, cutoff, now)) {
          requeues.push({ ...outcome, reason: SILENT_REASON })
        }
        // An offline worker downloads nothing for us: let another be asked (docs/api.md §7 pull_models).
        for (let i = 0; i < workers_offline.length; i += 500) {
          tx.delete(modelPulls)
            .where(inArray(modelPulls.worker_id, workers_offline.slice(i, i + 500)))
            .run()
        }
        return { workers_offline, requeues }
      })
    },

    async shardWithBatch(shardId) {
      const s = shardStatements(deps)
      const shard = s.shard.get({ id: shardId })
      if (!shard) return null
      return { shard, batch: s.batchRow.get({ id: shard.batch_id })! }
    },

    async shardsOf(batchId) {
      return shardStatements(deps)
        .shardsOf.all({ id: batchId })
        .map((r) => ({ ...r.shard, worker_name: r.worker_name, backup_worker_name: r.backup_worker_name }))
    },

    async shardTallies(batchIds) {
      const out = new Map<string, { status: ShardState; n: number }[]>()
      if (batchIds.length === 0) return new Map()
      for (const r of shardStatements(deps).tallies.all({ ids: JSON.stringify(batchIds) })) {
        out.set(r.batch_id, [...(out.get(r.batch_id) ?? []), r])
      }
      return new Map([...out].map(([id, states]) => [id, tallyShards(states)]))
    },

    async shardStates() {
      return shardStatements(deps).states.get()!
    },

    async lineSpans(batchId, first, count) {
      return lineSpansOf(deps, batchId, first, count)
    },

    async recordShardResults(r) {
      return writeTx(db, () => recordShardResultsInTx(deps, r))
    },

    ...sqliteJoins(deps),

    async queuedByOwnerClass() {
      const out = { idle: 0, running: 0 }
      for (const r of stmts(deps).queuedByOwnerClass.all()) out[r.running ? 'running' : 'idle'] = r.n
      return out
    },

    async waitingWork() {
      return stmts(deps).waitingWork.all()
    },

    async tryRunEvery(name: string, now: number, intervalSeconds: number) {
      const last = lastRun.get(name)
      if (last !== undefined && now - last < intervalSeconds) return false
      lastRun.set(name, now)
      return true
    },
  }
}
