import { badRequest, forbidden } from '../lib/errors'

// Rules of the worker protocol that every storage engine applies inside its own transaction
// (src/store): decided here once, never re-implemented in SQL.

/** What an engine reads about the batch a worker says it works on. */
export interface Holding {
  status: string
  holder: string | null
  assignment_id: string | null
  assignment_completed_at: number | null
}

/**
 * docs/api.md §7: progress, results and failures come only from the worker the batch is assigned to, and
 * (docs/api.md §7 fencing) from its current assignment when the run names one. Anything else is a 403 —
 * also for an unknown batch, so a key learns nothing about batches it does not hold.
 */
export function checkHolder<T extends Holding>(
  row: T | undefined | null,
  workerId: string,
  assignmentId: string | undefined,
): T & { assignment_id: string } {
  if (
    row?.status !== 'in_progress' ||
    row.holder !== workerId ||
    row.assignment_completed_at !== null ||
    row.assignment_id === null
  ) {
    throw forbidden('not_assigned', 'This batch is not assigned to this worker')
  }
  if (assignmentId !== undefined && assignmentId !== row.assignment_id) {
    throw forbidden('stale_assignment', 'This assignment is no longer current; stop the job')
  }
  return row as T & { assignment_id: string }
}

/**
 * POST /workers/progress (docs/api.md §7), checked against the held batch's stored counts: the total
 * must match, counts never go down, and together never exceed the total.
 */
export function checkProgress(
  held: { total: number; completed: number; failed: number },
  report: { total: number | undefined; completed: number; failed: number },
) {
  if (report.total !== undefined && report.total !== held.total) {
    throw badRequest(
      'total_mismatch',
      `total_prompts is ${report.total} but the batch has ${held.total} requests`,
      'total_prompts',
    )
  }
  if (report.completed < held.completed || report.failed < held.failed) {
    throw badRequest('counts_decreased', 'Progress counts never go down', 'completed_prompts')
  }
  if (report.completed + report.failed > held.total) {
    throw badRequest(
      'counts_exceed_total',
      `completed_prompts + failed_prompts exceeds the batch total of ${held.total}`,
      'completed_prompts',
    )
  }
}

/**
 * A batch a poll may claim, found by the engine under its claim lock: the oldest validated batch of
 * one (model, owner) pair among the worker's candidate models (docs/api.md §14).
 */
export interface ClaimHead {
  batch_id: string
  seq: number
  /** The batch's owner (batches.user_id). */
  user_id: string
  /**
   * docs/api.md §7 placement: the head's model's rank for this worker, lower first (placement.ts
   * placeHeads; under PLACEMENT=loaded_first, Poll rule 5: 0 loaded, 1 not).
   */
  rank: number
  /** docs/api.md §14: batches the owner has in progress now (0 when only one owner is waiting). */
  running: number
}

/**
 * docs/api.md §14: whose batches in progress need counting for a poll. Only between several owners does
 * the count decide anything; with one (a user draining their own queue) nothing is counted.
 */
export function ownersToCount(heads: readonly Pick<ClaimHead, 'user_id'>[]): string[] {
  const owners = [...new Set(heads.map((h) => h.user_id))]
  return owners.length > 1 ? owners : []
}

/**
 * Which head a poll claims: the model ranked first by the placement (docs/api.md §7: overdue models,
 * then loaded ones or the switch the spread calls for; placement.ts), then the owner with the fewest
 * batches in progress (docs/api.md §14 fair share: one user's 10,000 queued batches never starve
 * another's one), then the oldest batch (docs/api.md §7).
 */
export function pickClaim<H extends ClaimHead>(heads: readonly H[]): H | null {
  let best: H | null = null
  for (const h of heads) {
    if (
      !best ||
      h.rank < best.rank ||
      (h.rank === best.rank && (h.running < best.running || (h.running === best.running && h.seq < best.seq)))
    )
      best = h
  }
  return best
}

/**
 * docs/api.md §7 registration: a worker (re-)registers online and never-heartbeated; VRAM, activity and
 * loaded models come with its first heartbeat (docs/api.md §7 Poll rule 6).
 */
export function registeredState<F extends object>(fields: F, now: number) {
  return {
    ...fields,
    status: 'online' as const,
    activity: 'idle' as const,
    vram_total_gb: null,
    vram_available_gb: null,
    gpu_utilization: null,
    gpu_memory_used_gb: null,
    loaded_models: [] as string[],
    loading_models: [] as string[],
    inventory_sig: null,
    current_job_id: null,
    uptime_seconds: null,
    last_heartbeat_at: null,
    last_seen_at: now,
  }
}
