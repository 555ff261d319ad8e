import type { Deps } from '../../deps'

// GET /v1/stats/queue (docs/api.md §11, the dashboard's chart): queue depth and throughput over the
// last hour, one point per minute, rebuilt from the batches' own timestamps (no history table).
// An aggregate over every batch, like the pool capacity: counts only, never an id or an owner.

export const WINDOW_SECONDS = 3600
export const STEP_SECONDS = 60
/** Recomputed at most this often per server; the dashboard refreshes every 5 s. */
export const CACHE_SECONDS = 5

export interface QueuePoint {
  /** End of the minute (Unix seconds). */
  t: number
  /** Batches waiting for a worker (validating or validated) at `t`. */
  queued: number
  /** Requests of batches completed during the minute ending at `t` (completed + failed lines). */
  requests_completed: number
}

export interface QueueStats {
  object: 'queue.stats'
  as_of: number
  step_seconds: number
  /** Now, by status: what is waiting and what runs. */
  validating: number
  validated: number
  in_progress: number
  points: QueuePoint[]
}

/** The dashboard's queue chart (GET /v1/stats/queue), kept a few seconds, per server. */
export interface StatsState {
  queueStatsCache: { value?: QueueStats }
}

const WAITING = ['validating', 'validated'] as const

export async function computeQueueStats(deps: Deps & StatsState): Promise<QueueStats> {
  const now = deps.clock.now()
  const since = now - WINDOW_SECONDS
  const count = await deps.store.batches.activeCounts()
  const steps = WINDOW_SECONDS / STEP_SECONDS
  const points: QueuePoint[] = Array.from({ length: steps }, (_, i) => ({
    t: since + (i + 1) * STEP_SECONDS,
    queued: 0,
    requests_completed: 0,
  }))
  const bucketOf = (t: number) => Math.min(steps - 1, Math.max(0, Math.ceil((t - since) / STEP_SECONDS) - 1))
  for (const b of await deps.store.batches.timesSince(since)) {
    // Waiting from creation until claimed (or failed by validation). A batch waiting now after a
    // requeue counts as waiting since its creation: its timestamps keep only the last claim.
    const waiting = (WAITING as readonly string[]).includes(b.status)
    const left = waiting
      ? Number.POSITIVE_INFINITY
      : (b.in_progress_at ?? b.failed_at ?? b.completed_at ?? now)
    for (const p of points) if (b.created_at <= p.t && p.t < left) p.queued++
    if (b.status === 'completed' && b.completed_at !== null && b.completed_at > since)
      points[bucketOf(b.completed_at)].requests_completed += b.done
  }
  return {
    object: 'queue.stats',
    as_of: now,
    step_seconds: STEP_SECONDS,
    validating: count.validating ?? 0,
    validated: count.validated ?? 0,
    in_progress: count.in_progress ?? 0,
    points,
  }
}

/** The queue figures, recomputed at most every CACHE_SECONDS (kept per server on Deps). */
export async function queueStats(deps: Deps & StatsState): Promise<QueueStats> {
  const cached = deps.queueStatsCache.value
  if (cached && deps.clock.now() - cached.as_of < CACHE_SECONDS) return cached
  const fresh = await computeQueueStats(deps)
  deps.queueStatsCache.value = fresh
  return fresh
}
