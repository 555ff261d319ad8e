import { eq, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { batchAssignments, batches } from '../../db/schema'
import type { Tx } from '../../db/tx'
import type { Deps } from '../../deps'
import { transition } from '../batches/states'

// The one requeue path (SPEC §3, API.md §7): report-failure, the sweeper and re-registration all
// release a held batch through requeueBatch(), inside the caller's writeTx.

export const MAX_ERROR_CHARS = 2000

function prepare(db: Deps['db']) {
  return {
    batch: db
      .select({ status: batches.status, attempts: batches.attempts, total: batches.request_counts_total })
      .from(batches)
      .where(eq(batches.id, sql.placeholder('id')))
      .prepare(),
    dropAssignment: db
      .delete(batchAssignments)
      .where(eq(batchAssignments.batch_id, sql.placeholder('id')))
      .prepare(),
  }
}
const stmts = preparedOnce(prepare)

export type RequeueReason = 'reported_failure' | 'worker_silent' | 'worker_reregistered'

export interface RequeueOutcome {
  status: 'validated' | 'failed'
  batch_id: string
  attempts: number
  error: string
}

/** SPEC §8: stored error text is at most 2000 characters (code points: never half a character). */
export function truncateError(text: string): string {
  if (text.length <= MAX_ERROR_CHARS) return text
  return Array.from(text).slice(0, MAX_ERROR_CHARS).join('')
}

/**
 * Counts one failed attempt of an in_progress batch: attempts + 1, the assignment deleted, the error
 * stored; back to `validated` while attempts stay below MAX_BATCH_ATTEMPTS, else terminal `failed`
 * with completed_at/failed_at stamped and every request counted failed. Returns null when the
 * batch is not in_progress (a stale caller changes nothing).
 */
export function requeueBatch(
  tx: Tx,
  deps: Deps,
  batchId: string,
  reason: RequeueReason,
  errorText: string,
  now: number,
): RequeueOutcome | null {
  // Prepared statements run on the same connection, so inside the caller's transaction.
  const s = stmts(deps)
  const batch = s.batch.get({ id: batchId })
  if (batch?.status !== 'in_progress') return null
  const attempts = batch.attempts + 1
  const error = truncateError(errorText)
  s.dropAssignment.run({ id: batchId })
  const exhausted = attempts >= deps.config.MAX_BATCH_ATTEMPTS
  const row = exhausted
    ? transition(
        tx,
        batchId,
        'attempts_exhausted',
        now,
        {
          attempts,
          error,
          completed_at: now,
          failed_at: now,
          // completed + failed == total holds for terminal batches too.
          request_counts_completed: 0,
          request_counts_failed: batch.total,
        },
        reason,
      )
    : // The next run reports its own counts from zero.
      transition(
        tx,
        batchId,
        'requeued',
        now,
        { attempts, error, request_counts_completed: 0, request_counts_failed: 0 },
        reason,
      )
  if (!row) return null
  const outcome = exhausted ? 'failed' : 'validated'
  deps.metrics.requeues.inc({ reason, outcome })
  // API.md §7 wait_seconds: held polls look again (they run after this transaction commits).
  if (!exhausted) deps.pollWaiters.notify(row.model)
  return { status: outcome, batch_id: batchId, attempts, error }
}
