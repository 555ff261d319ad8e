import { gt, inArray, or, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { batches } from '../../db/schema'
import type { Deps } from '../../deps'

// GET /v1/stats/queue (API.md §11, the dashboard's chart): queue depth and throughput over the
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

const WAITING = ['validating', 'validated'] as const
const ACTIVE = [...WAITING, 'in_progress'] as const

function prepare(db: Deps['db']) {
  const since = sql.placeholder('since')
  return {
    active: db
      .select({ status: batches.status, n: sql<number>`count(*)` })
      .from(batches)
      .where(inArray(batches.status, [...ACTIVE]))
      .groupBy(batches.status)
      .prepare(),
    // Every batch that was waiting, running or finished within the window: what is active now
    // (batches_status_model), plus what finished since (batches_completed; a failed batch has
    // completed_at stamped too). Two index probes, never a scan of the whole history.
    recent: db
      .select({
        status: batches.status,
        created_at: batches.created_at,
        in_progress_at: batches.in_progress_at,
        completed_at: batches.completed_at,
        failed_at: batches.failed_at,
        done: sql<number>`${batches.request_counts_completed} + ${batches.request_counts_failed}`,
      })
      .from(batches)
      .where(or(inArray(batches.status, [...ACTIVE]), gt(batches.completed_at, since)))
      .prepare(),
  }
}
const stmts = preparedOnce(prepare)

export function computeQueueStats(deps: Deps): QueueStats {
  const s = stmts(deps)
  const now = deps.clock.now()
  const since = now - WINDOW_SECONDS
  const count = Object.fromEntries(s.active.all().map((r) => [r.status, r.n]))
  const steps = WINDOW_SECONDS / STEP_SECONDS
  const points: QueuePoint[] = Array.from({ length: steps }, (_, i) => ({
    t: since + (i + 1) * STEP_SECONDS,
    queued: 0,
    requests_completed: 0,
  }))
  const bucketOf = (t: number) => Math.min(steps - 1, Math.max(0, Math.ceil((t - since) / STEP_SECONDS) - 1))
  for (const b of s.recent.all({ since })) {
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

// Per server (keyed by Deps): the last figures and when they were computed.
const cacheByDeps = new WeakMap<Deps, QueueStats>()

/** The queue figures, recomputed at most every CACHE_SECONDS. */
export function queueStats(deps: Deps): QueueStats {
  const cached = cacheByDeps.get(deps)
  if (cached && deps.clock.now() - cached.as_of < CACHE_SECONDS) return cached
  const fresh = computeQueueStats(deps)
  cacheByDeps.set(deps, fresh)
  return fresh
}
