import type { BatchAssignmentRow, BatchRow } from '../db/schema'
import type { BatchChanges } from '../modules/batches/states'
import type { RequeueOutcome, RequeueReason } from '../modules/workers/requeue'
import type { NewFile } from './files'

// The work queue's verbs (API.md §12; STYLE example 13, after Oban's engine behaviour). What to
// do is decided above the seam, once — the matching predicate (modules/workers/matching.ts), the
// state table (batches/states.ts), the requeue rule (workers/requeue.ts), the holder and
// claim-order rules (workers/rules.ts); each engine (sqlite/queue.ts, postgres/queue.ts) only
// carries the decision out atomically in its own dialect.

/** One servable model a worker may claim a batch of: a stored `batches.model` slug. */
export interface ClaimCandidate<M> {
  model: string
  /** SPEC Poll rule 5: loaded on this worker. */
  loaded: boolean
  /** Whatever the caller needs back with the claim (the matched entry and profile). */
  match: M
}

export interface ClaimRequest<M> {
  workerId: string
  orgId: string
  /** A worker already holding this many assignments gets nothing (API.md §7). */
  maxConcurrent: number
  candidates: readonly ClaimCandidate<M>[]
  now: number
}

export interface Claimed<M> {
  batch: BatchRow
  assignmentId: string
  match: M
}

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
  /** The counts, usage, file ids and completed_at of results_delivered (SPEC §3). */
  changes: BatchChanges
  /** The output and error files' records (their bytes are published already). */
  files: NewFile[]
  now: number
}

export interface QueueStore {
  /**
   * SPEC §4 Poll: atomically claims the best validated batch among the candidates' models
   * (pickClaim), records the assignment and moves the batch to in_progress; null when there is
   * none or the worker is at its limit. Two pollers never get the same batch.
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
  /** POST /workers/report-failure: the holder rule, then one failed attempt (requeue rule). */
  reportFailure(report: FailureReport): Promise<RequeueOutcome>
  /**
   * The sweeper's pass: workers unseen since `cutoff` go offline; every in_progress batch whose
   * holder is silent, offline or gone is requeued as a failed attempt; an offline worker's
   * pull_models asks lapse.
   */
  sweep(now: number, cutoff: number): Promise<SweepOutcome>
  /**
   * GET /metrics (issue 13, API.md §14): validated batches by owner class — `idle`, the owner has
   * nothing in progress; `running`, the owner already runs something.
   */
  queuedByOwnerClass(): Promise<{ idle: number; running: number }>
  /**
   * Maintenance across instances (pg-boss `trySetTimestamp`): true for exactly one caller per
   * `intervalSeconds` among all instances sharing the database.
   */
  tryRunEvery(name: string, now: number, intervalSeconds: number): Promise<boolean>
}
