import type { BatchEvent } from './batch-states'

// The one requeue rule (docs/api.md §6, docs/api.md §7): report-failure, the sweeper and re-registration all
// release a held batch as one failed attempt; a worker removed by an admin (docs/api.md §3) releases
// it without counting one. The rule is decided here, once; each storage engine (src/store) applies
// the decision inside its own transaction.

export const MAX_ERROR_CHARS = 2000

export type RequeueReason = 'reported_failure' | 'worker_silent' | 'worker_reregistered' | 'worker_removed'

/**
 * Whether a requeue for `reason` counts an attempt of the batch (or shard). A worker an owner or
 * admin removes (DELETE /v1/orgs/{org_id}/workers/{worker_id}, docs/api.md §3) gives its work back
 * through no fault of the work: nothing is counted, so no batch fails for an admin's cleanup.
 */
export const countsAttempt = (reason: RequeueReason) => reason !== 'worker_removed'

/** Why held work is requeued: the reason (the transition's actor, whether an attempt counts) and the error stored. */
export interface RequeueCause {
  reason: RequeueReason
  error: string
}

/** docs/api.md §3: how a removed worker's batches and shards are requeued, and the error they store. */
export function removedRequeue(worker: { id: string; name: string }): {
  reason: 'worker_removed'
  error: string
} {
  return {
    reason: 'worker_removed',
    error: `worker ${worker.name} (${worker.id}) was removed by an organization admin; not counted as an attempt`,
  }
}

export interface RequeueOutcome {
  status: 'validated' | 'failed'
  batch_id: string
  attempts: number
  error: string
  /** The batch's model: held polls that can serve it look again (not part of any API answer). */
  model: string | null
  /**
   * docs/api.md §16: blob keys of the done shards' result parts of a split batch that just failed; the
   * caller removes them (nothing will join them now).
   */
  parts?: string[]
  /**
   * docs/api.md §16 backup copies: set when one copy of a shard ended while the other runs on, so
   * nothing was requeued: `promoted` (the holder ended; its backup holds the shard now) or `failed`
   * (the backup ended; the holder carries on).
   */
  backup?: 'promoted' | 'failed'
}

/** docs/api.md §10: stored error text is at most 2000 characters (code points: never half a character). */
export function truncateError(text: string): string {
  if (text.length <= MAX_ERROR_CHARS) return text
  return Array.from(text).slice(0, MAX_ERROR_CHARS).join('')
}

export interface RequeueDecision {
  event: Extract<BatchEvent, 'requeued' | 'attempts_exhausted'>
  changes: {
    attempts: number
    error: string
    request_counts_completed: number
    request_counts_failed: number
    completed_at?: number
    failed_at?: number
    /** docs/api.md §7 placement: a requeued batch waits again from now. */
    queued_at?: number
  }
  outcome: RequeueOutcome
}

/**
 * Counts one failed attempt of an in_progress batch: attempts + 1 and the error stored; back to
 * `validated` while attempts stay below MAX_BATCH_ATTEMPTS, else terminal `failed` with
 * completed_at/failed_at stamped and every request counted failed. Not `counted` (countsAttempt):
 * back to `validated` with its attempts as they were. The engine also deletes the assignment, in
 * the same transaction.
 */
export function requeueDecision(
  batch: { id: string; attempts: number; request_counts_total: number; model: string | null },
  maxAttempts: number,
  errorText: string,
  now: number,
  counted = true,
): RequeueDecision {
  const attempts = batch.attempts + (counted ? 1 : 0)
  const error = truncateError(errorText)
  const exhausted = counted && attempts >= maxAttempts
  const outcome: RequeueOutcome = {
    status: exhausted ? 'failed' : 'validated',
    batch_id: batch.id,
    attempts,
    error,
    model: batch.model,
  }
  return exhausted
    ? {
        event: 'attempts_exhausted',
        // completed + failed == total holds for terminal batches too.
        changes: {
          attempts,
          error,
          completed_at: now,
          failed_at: now,
          request_counts_completed: 0,
          request_counts_failed: batch.request_counts_total,
        },
        outcome,
      }
    : // The next run reports its own counts from zero.
      {
        event: 'requeued',
        changes: { attempts, error, request_counts_completed: 0, request_counts_failed: 0, queued_at: now },
        outcome,
      }
}
