import type { BatchAssignmentRow, BatchRow, BatchShardRow } from '../db/schema'
import type { BatchChanges } from '../domain/batch-states'
import type { Placement } from '../domain/placement'
import type { RequeueOutcome, RequeueReason } from '../domain/requeue'
import type { JoinTaken, ShardBounds, ShardTally } from '../domain/shards'
import type { LineSpans } from '../lib/blobs/spans'
import type { NewFile } from './files'

// The work queue's verbs (docs/api.md §12; ARCHITECTURE.md rule 13, after Oban's engine behaviour). What to
// do is decided above the seam, once — the matching predicate (domain/matching.ts), the
// state table (domain/batch-states.ts), the requeue rule (domain/requeue.ts), the holder and
// claim-order rules (domain/worker-rules.ts); each engine (sqlite/queue.ts, postgres/queue.ts) only
// carries the decision out atomically in its own dialect.

/** One servable model a worker may claim a batch of: a stored `batches.model` slug. */
export interface ClaimCandidate<M> {
  model: string
  /** docs/api.md §7 Poll rule 5: loaded on this worker (under PLACEMENT=queue, or being loaded). */
  loaded: boolean
  /** docs/api.md §7 placement: the worker holds work of this model now (a spare GPU goes elsewhere). */
  busy?: boolean
  /** docs/api.md §7 placement: the model (catalogue entry) the slug names; slugs of one entry share it. */
  key?: string
  /** Whatever the caller needs back with the claim (the matched entry and profile). */
  match: M
  /** The runtime model names that host it (docs/api.md §16: guided sizing counts the workers hosting one). */
  names?: readonly string[]
  /**
   * docs/api.md §7 Poll rule 7: the stored `batches.needs` values of this model the worker may take
   * (src/domain/capabilities.ts takeableNeeds); absent: only batches that need nothing.
   */
  needs?: readonly string[]
}

/** The stored needs a candidate may take (ClaimCandidate.needs). */
export const takesNeeds = (c: Pick<ClaimCandidate<unknown>, 'needs'>): readonly string[] => c.needs ?? ['']

/** One (model, needs) pair a worker may claim batches of (docs/api.md §7 Poll rule 7). */
export interface HeadKey {
  model: string
  needs: string
}

/**
 * The pairs whose waiting heads a poll reads with its worker's row (FleetStore.findWorkerWithHosting),
 * and whether split batches are left out (a worker that takes whole batches only, docs/api.md §16).
 */
export interface HeadsAsk {
  keys: readonly HeadKey[]
  wholeOnly: boolean
}

/** The oldest validated batch of one owner of one (model, needs) pair (docs/api.md §14). */
export interface WaitingHead {
  model: string
  needs: string
  user_id: string
  id: string
  seq: number
}

export interface ClaimRequest<M> {
  workerId: string
  orgId: string
  /** A worker already holding this many assignments gets nothing (docs/api.md §7). */
  maxConcurrent: number
  candidates: readonly ClaimCandidate<M>[]
  now: number
  /**
   * docs/api.md §16: set when the worker declared capabilities.shards (it may be handed shards): the
   * shard bounds, and the online cutoff (guided sizing counts the online shard-capable workers
   * hosting the model). Absent: whole batches only, never a split one.
   */
  shards?: {
    bounds: ShardBounds
    cutoff: number /** SHARD_BACKUPS: backup copies may be handed out. */
    backups: boolean
  }
  /**
   * docs/api.md §7 placement (PLACEMENT=queue): what the engine ranks the candidates' heads by
   * (domain/placement.ts placeHeads). Absent: PLACEMENT=loaded_first, loaded models first.
   */
  placement?: Placement
  /**
   * The waiting heads of every candidate's pairs (and maybe of more: the engine keeps the
   * candidates'), read with the worker's row, split batches left out unless `shards` is set.
   * Absent: the engine reads them.
   */
  heads?: readonly WaitingHead[]
}

/** docs/api.md §7 placement: the work waiting for one batches.model slug. */
export interface WaitingWork {
  model: string
  /** Requests of its validated batches, and the uncut and requeued shards of its split ones. */
  requests: number
}

export interface Claimed<M> {
  batch: BatchRow
  assignmentId: string
  match: M
  /** docs/api.md §16: the shard claimed, or null for a whole batch. */
  shard: BatchShardRow | null
  /**
   * docs/api.md §16 backup copies: the claim is a backup copy of `shard` (its lease is the shard's
   * backup_* columns; `assignmentId` is the backup's own).
   */
  backup: boolean
}

/** A shard with what the worker protocol checks about it and its batch. */
export interface ShardWithBatch {
  shard: BatchShardRow
  batch: BatchRow
}

export interface DeliveredShard {
  shardId: string
  workerId: string
  assignmentId: string
  completed: number
  failed: number
  usage: Record<string, number>
  /** Blob keys of the shard's result parts (published already), null when a part is empty. */
  outputKey: string | null
  errorKey: string | null
  now: number
}

/** What recording a shard's results did (docs/api.md §16). */
export interface ShardResultsRecorded {
  batch: BatchRow
  /** Every request of the batch is now in a done shard: the caller joins the parts. */
  last: boolean
  /**
   * Backup copies: `won` when the backup's upload completed the shard, `lost` when the holder's did
   * while a backup ran; null when the shard had no backup.
   */
  backup: 'won' | 'lost' | null
}

export type { ByteRange, LineSpans } from '../lib/blobs/spans'

export interface FailureReport {
  workerId: string
  jobId: string
  assignmentId: string | undefined
  error: string
  now: number
}

export interface SweepOutcome {
  workers_offline: string[]
  requeues: (RequeueOutcome & { reason: RequeueReason })[]
}

export interface DeliveredResults {
  batchId: string
  workerId: string
  assignmentId: string
  /** The counts, usage, file ids and completed_at of results_delivered (docs/api.md §6). */
  changes: BatchChanges
  /** The output and error files' records (their bytes are published already). */
  files: NewFile[]
  now: number
}

export interface QueueStore {
  /** docs/api.md §16: a shard and its batch; null when there is no such shard. */
  shardWithBatch(shardId: string): Promise<ShardWithBatch | null>
  /**
   * A batch's shards in shard order, with the name of the worker each was last held by and of the
   * worker of its backup copy (docs/api.md §16).
   */
  shardsOf(
    batchId: string,
  ): Promise<(BatchShardRow & { worker_name: string | null; backup_worker_name: string | null })[]>
  /** The batch object's `shards` for each split batch among `batchIds` (docs/api.md §16). */
  shardTallies(batchIds: string[]): Promise<Map<string, ShardTally>>
  /** GET /metrics gridkeep_shards{state}. */
  shardStates(): Promise<Record<'waiting' | 'running' | 'done', number>>
  /**
   * Where request lines [first, first + count) of a batch's execution order lie in its input, from the
   * request-line index validation wrote (docs/api.md §16, §6 "Execution order"); null when the batch
   * has none.
   */
  lineSpans(batchId: string, first: number, count: number): Promise<LineSpans | null>
  /**
   * POST /workers/upload-results for a shard: in one transaction, the shard holder rule again (either
   * copy's lease: the first complete upload wins), the shard done with its counts and parts, the
   * batch's live counts moved by the difference.
   */
  recordShardResults(r: DeliveredShard): Promise<ShardResultsRecorded>
  /**
   * docs/api.md §16: takes the join of a split batch for `joiner` until `until` when no other
   * joiner's lease runs and there is something to do (domain/shards.ts joinTaken), recording `files`
   * (the blobs the joiner will write) in the lease first. Null when another joiner holds it or there
   * is nothing to do; else what a lapsed joiner left (the caller removes it) and whether to join.
   */
  takeJoin(r: {
    batchId: string
    joiner: string
    files: string[]
    now: number
    until: number
  }): Promise<JoinTaken | null>
  /** The joiner's lease extended to `until`; false when it is no longer the joiner's. */
  renewJoin(r: { batchId: string; joiner: string; until: number }): Promise<boolean>
  /**
   * The last shard's results are in and the parts joined: while `joiner` still holds the join's
   * lease, in_progress → completed with the summed counts and usage, the joined files recorded, and
   * the shards' parts cleared from them into the lease (the blobs left to remove, until `until`).
   * Null when the lease is another's, or the batch is no longer in_progress: the caller's files are
   * its own to remove.
   */
  completeSplit(r: {
    batchId: string
    joiner: string
    changes: BatchChanges
    files: NewFile[]
    now: number
    until: number
  }): Promise<{ batch: BatchRow; parts: string[] } | null>
  /** Everything the joiner's lease listed is removed: the lease goes (if still the joiner's). */
  endJoin(batchId: string, joiner: string): Promise<void>
  /**
   * docs/api.md §16: the split batches to join now — in progress, every shard done, no joiner's
   * lease running (the uploader that should have joined them died) — and those whose joiner's lease
   * lapsed at `now` with blobs left to remove.
   */
  joinsDue(now: number): Promise<string[]>
  /**
   * docs/api.md §7 Poll rules: atomically claims the best validated batch among the candidates' models
   * (pickClaim), records the assignment and moves the batch to in_progress; null when there is
   * none or the worker is at its limit. Two pollers never get the same batch. A shard-capable
   * worker that finds nothing else gets a backup copy of a running shard (pickBackup, docs/api.md §16).
   */
  claim<M>(req: ClaimRequest<M>): Promise<Claimed<M> | null>
  /** A batch and its assignment, for upload-results' holder check and idempotent repeats. */
  batchWithAssignment(
    batchId: string,
  ): Promise<{ batch: BatchRow | null; assignment: BatchAssignmentRow | null }>
  /**
   * POST /workers/upload-results: in one transaction, the holder rule again (a requeue or re-claim
   * while the upload streamed wins), in_progress → completed, the assignment completed, the output
   * and error files recorded. Throws the holder rule's 403 otherwise.
   */
  recordResults(results: DeliveredResults): Promise<BatchRow>
  /**
   * POST /workers/report-failure: the holder rule, then one failed attempt (requeue rule); for a
   * shard with another copy running, that copy carries on instead (copyEnded, docs/api.md §16).
   */
  reportFailure(report: FailureReport): Promise<RequeueOutcome>
  /**
   * The sweeper's pass: workers unseen since `cutoff` go offline; every in_progress batch whose
   * holder is silent, offline or gone is requeued as a failed attempt; an offline worker's
   * pull_models asks lapse.
   */
  sweep(now: number, cutoff: number): Promise<SweepOutcome>
  /**
   * GET /metrics (docs/operations.md "Metrics", docs/api.md §14): validated batches by owner class — `idle`, the owner has
   * nothing in progress; `running`, the owner already runs something.
   */
  queuedByOwnerClass(): Promise<{ idle: number; running: number }>
  /**
   * docs/api.md §7 placement: the work waiting per batches.model slug (one pass over the waiting
   * batches and split batches' shards, read at most once a second per server).
   */
  waitingWork(): Promise<WaitingWork[]>
  /**
   * Maintenance across instances (pg-boss `trySetTimestamp`): true for exactly one caller per
   * `intervalSeconds` among all instances sharing the database.
   */
  tryRunEvery(name: string, now: number, intervalSeconds: number): Promise<boolean>
}
