import { conflict, forbidden } from '../lib/errors'

// Shards (docs/api.md §16): how a batch is cut into contiguous runs of its request lines and handed to
// every worker that can serve it. Pure rules over plain numbers, decided here once; each storage
// engine applies them inside its claim transaction.

export interface ShardBounds {
  /** SHARD_MIN_REQUESTS: the smallest shard; a batch of at most twice this is never split. */
  min: number
  /** SHARD_MAX_REQUESTS: the largest shard; 0 turns sharding off. */
  max: number
}

/**
 * Whether a batch of `total` requests is handed out as shards: sharding on, more than twice the
 * smallest shard, and a request-line index written by validation (a batch validated before the
 * index existed runs whole).
 */
export function splittable(total: number, bounds: ShardBounds, indexed: boolean): boolean {
  return bounds.max > 0 && total > 2 * bounds.min && indexed
}

/**
 * Guided self-scheduling (OpenMP `schedule(guided)`): the next shard takes
 * ceil(unclaimed ÷ eligible workers) requests, bounded by [min, max]; the last shard is whatever
 * remains, however small (merging a small remainder into the shard before it would make the batch's
 * last shard its slowest).
 */
export function nextShardSize(unclaimed: number, eligibleWorkers: number, bounds: ShardBounds): number {
  if (unclaimed <= 0) return 0
  const guided = Math.ceil(unclaimed / Math.max(1, eligibleWorkers))
  return Math.min(bounds.max, Math.max(bounds.min, guided), unclaimed)
}

export type ShardState = 'waiting' | 'running' | 'done'

/** The batch object's `shards` (docs/api.md §16): how many shards are in each state. */
export interface ShardTally {
  total: number
  waiting: number
  running: number
  done: number
}

export function tallyShards(states: readonly { status: ShardState; n: number }[]): ShardTally {
  const t: ShardTally = { total: 0, waiting: 0, running: 0, done: 0 }
  for (const s of states) {
    t[s.status] += s.n
    t.total += s.n
  }
  return t
}

/** Shard job ids carry their own prefix: a job id names a shard or a whole batch, never both. */
export const SHARD_ID_PREFIX = 'shard_'
export const isShardId = (jobId: string) => jobId.startsWith(SHARD_ID_PREFIX)

/** What an engine reads about the shard a worker says it works on. */
export interface ShardHolding {
  status: ShardState
  worker_id: string | null
  assignment_id: string | null
  batch_status: string
}

/**
 * docs/api.md §16: progress, results and failures of a shard come only from its holder's current
 * assignment (the §7 holder rule and fencing, per shard). A shard this worker held whose batch has
 * failed meanwhile answers 409 `batch_not_in_progress`, so the daemon drops the job.
 */
export function checkShardHolder<T extends ShardHolding>(
  row: T | undefined | null,
  workerId: string,
  assignmentId: string | undefined,
): T & { assignment_id: string } {
  if (!row || row.worker_id !== workerId || row.assignment_id === null) {
    throw forbidden('not_assigned', 'This shard is not assigned to this worker')
  }
  if (row.batch_status !== 'in_progress') {
    throw conflict('batch_not_in_progress', 'The batch of this shard is no longer in progress; drop the job')
  }
  if (row.status !== 'running') throw forbidden('not_assigned', 'This shard is not assigned to this worker')
  if (assignmentId !== undefined && assignmentId !== row.assignment_id) {
    throw forbidden('stale_assignment', 'This assignment is no longer current; stop the job')
  }
  return row as T & { assignment_id: string }
}
