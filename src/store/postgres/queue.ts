import type { SQL } from 'bun'
import { eq, inArray, lte } from 'drizzle-orm'
import type { Config } from '../../config'
import * as schema from '../../db/pg/schema'
import type { BatchAssignmentRow, BatchRow } from '../../db/schema'
import { BATCH_TRANSITIONS } from '../../domain/batch-states'
import { placeHeads, slugsToAge } from '../../domain/placement'
import { countsAttempt, type RequeueCause, type RequeueOutcome, requeueDecision } from '../../domain/requeue'
import { isShardId, tallyShards } from '../../domain/shards'
import { SILENT_REASON, silentRequeue } from '../../domain/sweep'
import { checkHolder, ownersToCount, pickClaim } from '../../domain/worker-rules'
import { forbidden } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import {
  type Claimed,
  type ClaimRequest,
  type HeadKey,
  type HeadsAsk,
  type QueueStore,
  type SweepOutcome,
  takesNeeds,
  type WaitingHead,
} from '../queue'
import { goesOfflineWhere, holdingColumns, orphanedBatch } from '../statements'
import type { PgDb, PgTx } from './db'
import { postgresJoins } from './joins'
import {
  claimBackup,
  claimFromHead,
  endShardCopyLocked,
  heldShard,
  lineSpans,
  lockShard,
  openSplitHeads,
  recordShardResultsTx,
  requeueSilentShards,
  type ShardClaim,
  shardStateCounts,
  shardStates,
  shardsOf,
  shardWithBatch,
} from './shards'
import { transition } from './transition'

// The work queue on PostgreSQL, where any number of instances share one database. Claims lock the
// head of each candidate model with FOR UPDATE SKIP LOCKED, so concurrent polls skip each other's
// rows instead of queueing behind them; UNIQUE(batch_id) stays the backstop.

const { batches, batchAssignments, files, workers, modelPulls, maintenanceRuns } = schema

/** The batch a worker says it works on, locked, with its current assignment (if any): what the holder rule reads. */
export async function lockHolding(tx: PgTx, batchId: string) {
  const [row] = await tx
    .select(holdingColumns(batches, batchAssignments))
    .from(batches)
    .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
    .where(eq(batches.id, batchId))
    .for('update', { of: batches })
  return row
}

/** One failed attempt (or, for a removed worker, none) of a batch the caller has locked and seen in_progress (requeue rule). */
export async function requeueLocked(
  tx: PgTx,
  maxAttempts: number,
  batch: { id: string; attempts: number; request_counts_total: number; model: string | null },
  { reason, error }: RequeueCause,
  now: number,
): Promise<RequeueOutcome | null> {
  const decision = requeueDecision(batch, maxAttempts, error, now, countsAttempt(reason))
  await tx.delete(batchAssignments).where(eq(batchAssignments.batch_id, batch.id))
  if (!(await transition(tx, batch.id, decision.event, now, decision.changes, reason))) return null
  return decision.outcome
}

// The claim's statements are Bun SQL tagged queries, prepared once per connection by the client:
// a poll is the hot path of every instance, and building its queries through drizzle cost more
// CPU than PostgreSQL spent running them (profiled under bench/poll.ts).

/**
 * The oldest validated batch of each owner of each candidate (model, needs) pair (docs/api.md §14,
 * §7 Poll rule 7), as the recursive CTE `heads` (a fragment for a WITH RECURSIVE): each step of the
 * recursion is the head of the next owner after the last one, one probe of batches_status_model (a
 * skip scan over the owners), so the cost follows the owners waiting, never the depth of the queue —
 * batches whose needs the worker cannot meet are never stepped over. The ORDER BY names every
 * column of that index and `status = ANY('{…}')` is no planner constant: only that index gives the
 * order without a sort (batches_status_user would walk every waiting batch of every model; the
 * primary key, every batch). Run on `db.$claims`, it is planned once per connection (generic plan).
 * `wholeOnly`: a worker that takes whole batches only never sees a split one (docs/api.md §16); a
 * bound flag, so both forms are one statement and one plan.
 */
export function headsCte(q: SQL, { keys, wholeOnly }: HeadsAsk) {
  const waiting = `{${BATCH_TRANSITIONS.claimed.from}}`
  const models = keys.map((k) => k.model)
  const needs = keys.map((k) => k.needs)
  return q`heads AS (
      SELECT h.model, h.needs, h.user_id, h.id, h.seq
      FROM unnest(${models}::text[], ${needs}::text[]) AS m(model, needs)
      CROSS JOIN LATERAL (
        SELECT model, needs, user_id, id, seq FROM batches
        WHERE status = ANY(${waiting}::text[]) AND model = m.model AND needs = m.needs
          AND NOT (split AND ${wholeOnly}::boolean)
        ORDER BY status, model, needs, user_id, seq LIMIT 1
      ) h
      UNION ALL
      SELECT n.model, n.needs, n.user_id, n.id, n.seq FROM heads p
      CROSS JOIN LATERAL (
        SELECT model, needs, user_id, id, seq FROM batches
        WHERE status = ANY(${waiting}::text[]) AND model = p.model AND needs = p.needs
          AND user_id > p.user_id AND NOT (split AND ${wholeOnly}::boolean)
        ORDER BY status, model, needs, user_id, seq LIMIT 1
      ) n
    )`
}

/** The waiting heads of `keys` (headsCte), read on their own. */
export const claimHeads = (q: SQL, keys: readonly HeadKey[], wholeOnly = false) =>
  q`WITH RECURSIVE ${headsCte(q, { keys, wholeOnly })}
    SELECT model, needs, user_id, id, seq::float8 AS seq FROM heads` as Promise<WaitingHead[]>

/**
 * docs/api.md §7 placement: each model's longest-waiting batch, one probe of batches_waiting per model
 * (the literal status is what lets the planner use that partial index).
 */
export const oldestWaiting = (q: SQL, models: string[]) =>
  q`SELECT m.model, (SELECT min(queued_at) FROM batches WHERE status = 'validated' AND queued_at IS NOT NULL AND model = m.model)::float8 AS at
    FROM unnest(${models}::text[]) AS m(model)` as Promise<{ model: string; at: number | null }[]>

/**
 * docs/api.md §14: how much each of `owners` has in progress — whole batches (batches_status_user) and
 * held shards of split ones with their backup copies (docs/api.md §16, batch_shards_user).
 */
const runningOf = (q: SQL, owners: string[]) =>
  q`SELECT user_id, sum(n)::int AS n FROM (
      SELECT user_id, count(*) AS n FROM batches
      WHERE status = 'in_progress' AND NOT split AND user_id = ANY(${owners}::text[]) GROUP BY user_id
      UNION ALL
      SELECT user_id, count(*) + count(backup_worker_id) AS n FROM batch_shards
      WHERE status = 'running' AND user_id = ANY(${owners}::text[]) GROUP BY user_id) r
    GROUP BY user_id` as Promise<{ user_id: string; n: number }[]>

/**
 * The claim itself (the state table's `claimed` edge, ARCHITECTURE.md rule 7, and the assignment) in one
 * autocommit statement: the oldest validated batch of the chosen model and owner from the chosen
 * head on that no other poll holds (FOR UPDATE SKIP LOCKED), in a free slot of the worker; one row
 * saying whether the worker had no free slot (`full`), with the batch claimed, if any, as one JSON
 * value (to_jsonb gives bigint columns as numbers: the row needs no conversion, as in
 * fleet.ts findWorkerWithHosting).
 *
 * docs/api.md §7 max_concurrent_jobs, exactly, without a lock that makes a worker's polls take turns:
 * each open assignment holds one of the worker's slots (batch_assignments_slot, unique among open
 * assignments), and the claim takes a slot below max_concurrent_jobs less what holds none — open
 * assignments older than the slots, or copied from SQLite (whose claims take turns and leave the
 * slot null), and held shards and backup copies (docs/api.md §16: they count toward the limit). A
 * worker without capabilities.shards holds no shard past its registration, and the claims of a
 * shard-capable worker take turns (shards.ts claimFromHead, claimBackup), never this one; what
 * holds no slot only ever finishes. So every open assignment's slot lies below the limit less what
 * holds none now, no two share one, and no more than the limit are ever open. Two polls of one
 * worker that chose the same slot cannot both commit: the second fails (23505) as a whole, its
 * batch untouched, and tries again with a fresh snapshot.
 *
 * The slot is the one above the highest taken (one probe of batch_assignments_slot from its end),
 * or, once that reaches the bound, the lowest free below it (a walk over the worker's slots, at most
 * max_concurrent_jobs of them); what holds none is counted by probes of indexes that hold only
 * such rows (batch_assignments_slotless, batch_shards'). So the check costs the same however many
 * assignments the worker holds, as long as its highest slot is below the bound.
 * A split batch is never claimed whole.
 *
 * Registration locks the worker's row (FOR UPDATE) while it requeues what the old incarnation held;
 * the claim holds a KEY SHARE lock on that row until it commits, so a claim either commits first (and
 * its batch is requeued) or waits and claims for the worker as registered. Heartbeats do not wait
 * for claims, nor claims for heartbeats.
 *
 * Starting at the head's `seq` spares a second walk over the index entries that every batch
 * claimed since the last VACUUM leaves at the front of the queue (the heads read has just walked
 * them); nothing older was waiting when the heads were read. A batch requeued since, older than
 * the head, is the next poll's head.
 */
export function claimOne(
  q: SQL,
  pick: { model: string; needs: string; user_id: string; seq: number },
  a: { id: string; workerId: string; orgId: string; now: number; maxConcurrent: number },
) {
  const { from, to } = BATCH_TRANSITIONS.claimed
  return q`
    WITH worker AS (
      SELECT id FROM workers WHERE id = ${a.workerId} FOR KEY SHARE
    ), bound AS (
      SELECT (${a.maxConcurrent}::int
        - (SELECT count(*) FROM batch_assignments
           WHERE worker_id = ${a.workerId} AND slot IS NULL AND completed_at IS NULL)
        - (SELECT count(*) FROM batch_shards WHERE worker_id = ${a.workerId} AND status = 'running')
        - (SELECT count(*) FROM batch_shards
           WHERE backup_worker_id = ${a.workerId} AND status = 'running'))::int AS n,
        coalesce((SELECT slot FROM batch_assignments
                  WHERE worker_id = ${a.workerId} AND slot IS NOT NULL AND completed_at IS NULL
                  ORDER BY slot DESC LIMIT 1), -1) + 1 AS above
    ), open AS (
      SELECT CASE WHEN above < n THEN above ELSE (
          SELECT min(i) FROM (
            SELECT slot, (row_number() OVER (ORDER BY slot) - 1)::int AS i FROM batch_assignments
            WHERE worker_id = ${a.workerId} AND slot IS NOT NULL AND completed_at IS NULL) held
          WHERE slot <> i AND i < n)
        END AS slot
      FROM bound
    ), claimed AS (
      UPDATE batches SET status = ${to}, in_progress_at = ${a.now}, updated_at = ${a.now}
      WHERE id = (
        SELECT id FROM batches
        WHERE status = ANY(${`{${from}}`}::text[]) AND model = ${pick.model} AND needs = ${pick.needs}
          AND user_id = ${pick.user_id} AND seq >= ${pick.seq}::bigint AND NOT split
        ORDER BY status, model, needs, user_id, seq LIMIT 1
        FOR UPDATE SKIP LOCKED
      ) AND status = ${from}
        AND (SELECT slot FROM open) IS NOT NULL AND EXISTS (SELECT FROM worker)
      RETURNING *
    ), assigned AS (
      INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at, slot)
      SELECT ${a.id}, id, ${a.workerId}, ${a.orgId}, ${a.now}, (SELECT slot FROM open) FROM claimed
    )
    SELECT open.slot IS NULL AS full, to_jsonb(claimed) AS batch FROM open LEFT JOIN claimed ON TRUE` as Promise<
    [{ full: boolean; batch: BatchRow | null }]
  >
}

/** Another poll of the same worker took the slot this claim chose (batch_assignments_slot). */
const slotTaken = (e: unknown) =>
  (e as { errno?: string; constraint?: string }).errno === '23505' &&
  (e as { constraint?: string }).constraint === 'batch_assignments_slot'

/** The claim, tried again while another poll of the same worker takes the slot it chose. */
async function claimInSlot(
  db: PgDb,
  pick: Parameters<typeof claimOne>[1],
  a: Parameters<typeof claimOne>[2],
) {
  for (;;) {
    try {
      const [{ full, batch }] = await claimOne(db.$claims, pick, a)
      return { full, batch }
    } catch (e) {
      // Each retry follows a claim that committed for this worker: they end at its limit.
      if (!slotTaken(e)) throw e
    }
  }
}

/**
 * A shard-capable worker's claim from one head (shards.ts claimFromHead), one transaction on the
 * claims' connections, tried again while a claim of the same worker outside its claim lock takes
 * the slot a whole batch would have taken.
 */
async function claimAsShardWorker(
  db: PgDb,
  batchId: string,
  req: Parameters<typeof claimFromHead>[2],
  names: readonly string[],
): Promise<ShardClaim> {
  for (;;) {
    try {
      return await db.$claims.begin((q) => claimFromHead(q as unknown as SQL, batchId, req, names))
    } catch (e) {
      if (!slotTaken(e)) throw e
    }
  }
}

export function postgresQueue(db: PgDb, config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>): QueueStore {
  const maxAttempts = config.MAX_BATCH_ATTEMPTS
  return {
    async claim<M>(req: ClaimRequest<M>): Promise<Claimed<M> | null> {
      if (req.candidates.length === 0) return null
      const byModel = new Map(req.candidates.map((c) => [c.model, c]))
      const models = [...byModel.keys()]
      const keys = req.candidates.flatMap((c) => takesNeeds(c).map((needs) => ({ model: c.model, needs })))
      // docs/api.md §7 placement: the longest waits the ranking may read (of the candidates: the
      // heads are not known yet), read fresh beside the heads.
      const aged = slugsToAge(
        req.placement,
        req.candidates.map((candidate) => ({ candidate })),
      )
      // The heads are read before the claim: they only name whom to claim from, and the claim
      // re-checks everything, the worker's limit too (claimOne, claimFromHead). docs/api.md §16:
      // split batches in progress with shards left join the choice, those whose needs the worker
      // meets (docs/api.md §7 Poll rule 7). The reads go out at once: one round trip, none when the
      // heads came with the worker's row and no other read is needed.
      const takes = (r: WaitingHead) =>
        byModel.has(r.model) && takesNeeds(byModel.get(r.model)!).includes(r.needs)
      const [found, split, waits] = await Promise.all([
        req.heads ? req.heads.filter(takes) : claimHeads(db.$claims, keys, !req.shards),
        req.shards ? openSplitHeads(db.$claims, models) : [],
        aged.length ? oldestWaiting(db.$claims, aged) : [],
      ])
      for (const r of split) if (takes(r)) found.push(r)
      const heads = found.map((r) => {
        const c = byModel.get(r.model)!
        return {
          batch_id: r.id,
          seq: r.seq,
          user_id: r.user_id,
          model: c.model,
          needs: r.needs,
          rank: 0,
          running: 0,
          candidate: c,
        }
      })
      const oldest = new Map(waits.map((r) => [r.model, r.at]))
      const placed = placeHeads(req.placement, heads, oldest, req.now)
      const owners = ownersToCount(placed)
      if (owners.length) {
        const running = new Map((await runningOf(db.$claims, owners)).map((r) => [r.user_id, r.n]))
        for (const h of placed) h.running = running.get(h.user_id) ?? 0
      }
      // Another poll may hold or have taken the chosen owner's batches: then the next best, until
      // the worker is at its limit.
      for (let best = pickClaim(placed); best; best = pickClaim(placed)) {
        const match = best.candidate.match
        if (req.shards) {
          const got = await claimAsShardWorker(
            db,
            best.batch_id,
            {
              workerId: req.workerId,
              orgId: req.orgId,
              now: req.now,
              maxConcurrent: req.maxConcurrent,
              ...req.shards,
            },
            best.candidate.names ?? [],
          )
          if (got.kind === 'claimed')
            return {
              batch: got.batch,
              assignmentId: got.assignmentId,
              match,
              shard: got.shard,
              backup: false,
            }
          if (got.kind === 'full') return null
        } else {
          const assignmentId = newId('asg_')
          const { full, batch } = await claimInSlot(db, best, {
            id: assignmentId,
            workerId: req.workerId,
            orgId: req.orgId,
            now: req.now,
            maxConcurrent: req.maxConcurrent,
          })
          if (batch) {
            const { from, to } = BATCH_TRANSITIONS.claimed
            log.info('batch transition', {
              batch_id: batch.id,
              from,
              to,
              event: 'claimed',
              reason: `worker ${req.workerId}`,
            })
            return { batch, assignmentId, match, shard: null, backup: false }
          }
          if (full) return null
        }
        placed.splice(placed.indexOf(best), 1)
      }
      // docs/api.md §16 backup copies: the lowest priority of a claim, when nothing else is.
      if (!req.shards?.backups) return null
      const got = await claimBackup(
        db.$claims,
        { workerId: req.workerId, orgId: req.orgId, now: req.now, maxConcurrent: req.maxConcurrent },
        byModel,
        maxAttempts,
      )
      if (got.kind !== 'claimed') return null
      return {
        batch: got.batch,
        assignmentId: got.assignmentId,
        match: byModel.get(got.batch.model!)!.match,
        shard: got.shard,
        backup: true,
      }
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

    async recordResults(r) {
      return db.transaction(async (tx) => {
        checkHolder(await lockHolding(tx, r.batchId), r.workerId, r.assignmentId)
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

    async reportFailure(r) {
      return db.transaction(async (tx) => {
        if (isShardId(r.jobId)) {
          const locked = heldShard(await lockShard(tx, r.jobId), r.workerId, r.assignmentId)
          // Locked and seen running, its batch in_progress, by the holder rule: this copy ends.
          const cause = { reason: 'reported_failure', error: r.error } as const
          return (await endShardCopyLocked(tx, maxAttempts, locked, locked.copy, cause, r.now))!
        }
        const held = checkHolder(await lockHolding(tx, r.jobId), r.workerId, r.assignmentId)
        // Locked and seen in_progress by the holder rule: the requeue happens.
        return (await requeueLocked(
          tx,
          maxAttempts,
          held,
          { reason: 'reported_failure', error: r.error },
          r.now,
        ))!
      })
    },

    async sweep(now: number, cutoff: number): Promise<SweepOutcome> {
      return db.transaction(async (tx) => {
        const workers_offline = (
          await tx
            .update(workers)
            .set({ status: 'offline' })
            .where(goesOfflineWhere(workers, cutoff))
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
          .where(orphanedBatch(batches, workers, cutoff))
          .for('update', { of: batches })
        const requeues: SweepOutcome['requeues'] = []
        for (const o of orphans) {
          const cause = silentRequeue(o.worker_id)
          const outcome = await requeueLocked(tx, maxAttempts, o, cause, now)
          if (outcome) requeues.push({ ...outcome, reason: cause.reason })
        }
        for (const outcome of await requeueSilentShards(tx, maxAttempts, cutoff, now)) {
          requeues.push({ ...outcome, reason: SILENT_REASON })
        }
        // An offline worker downloads nothing for us: let another be asked (docs/api.md §7 pull_models).
        if (workers_offline.length)
          await tx.delete(modelPulls).where(inArray(modelPulls.worker_id, workers_offline))
        return { workers_offline, requeues }
      })
    },

    shardWithBatch: (shardId) => shardWithBatch(db, shardId),
    shardsOf: (batchId) => shardsOf(db, batchId),

    async shardTallies(batchIds) {
      const byBatch = new Map<string, Awaited<ReturnType<typeof shardStateCounts>>>()
      for (const r of await shardStateCounts(db, batchIds)) {
        byBatch.set(r.batch_id, [...(byBatch.get(r.batch_id) ?? []), r])
      }
      return new Map([...byBatch].map(([id, states]) => [id, tallyShards(states)]))
    },

    shardStates: () => shardStates(db),
    lineSpans: (batchId, first, count) => lineSpans(db, batchId, first, count),

    async recordShardResults(r) {
      return db.transaction((tx) => recordShardResultsTx(tx, r))
    },

    ...postgresJoins(db),

    async queuedByOwnerClass() {
      const rows = (await db.$client`
        SELECT q.user_id IN (SELECT user_id FROM batches WHERE status = 'in_progress') AS running,
          sum(q.n)::int AS n
        FROM (SELECT user_id, count(*) AS n FROM batches WHERE status = 'validated' GROUP BY user_id) q
        GROUP BY 1`) as { running: boolean; n: number }[]
      const out = { idle: 0, running: 0 }
      for (const r of rows) out[r.running ? 'running' : 'idle'] = r.n
      return out
    },

    async waitingWork() {
      // docs/api.md §7 placement: validated batches (batches_validated_model alone), the uncut rest of
      // split batches in progress (batches_split_model) and their requeued shards.
      return (await db.$client`
        SELECT model, sum(requests)::float8 AS requests FROM (
          SELECT model, sum(request_counts_total) AS requests
          FROM batches WHERE status = 'validated' GROUP BY model
          UNION ALL
          SELECT model, sum(request_counts_total - next_request)
          FROM batches WHERE split AND status = 'in_progress' GROUP BY model
          UNION ALL
          SELECT b.model, sum(s.requests) FROM batch_shards s JOIN batches b ON b.id = s.batch_id
          WHERE s.status = 'waiting' AND b.status = 'in_progress' GROUP BY b.model) w
        WHERE model IS NOT NULL GROUP BY model`) as { model: string; requests: number }[]
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
