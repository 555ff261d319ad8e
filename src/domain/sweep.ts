import type { RequeueReason } from './requeue'

// The sweeper's decisions (docs/api.md §7 Worker, requeue rule), taken once here; each storage engine
// (src/store/*/queue.ts sweep, src/store/*/shards.ts) writes the same comparisons in its SQL and
// requeues what they select with the reason and error text below.

/**
 * A worker is silent once it was last seen at or before the cutoff (workers/liveness.ts
 * onlineCutoff): an online one goes offline. SQL form: status = 'online' AND last_seen_at <= cutoff.
 */
export function goesOffline(w: { status: string; last_seen_at: number }, cutoff: number): boolean {
  return w.status === 'online' && w.last_seen_at <= cutoff
}

/**
 * A running batch or shard is orphaned when its holder is not live: gone (no row), offline, or
 * silent. SQL form: w.id IS NULL OR w.status = 'offline' OR w.last_seen_at <= cutoff.
 */
export function holderSilent(
  holder: { status: string; last_seen_at: number } | null | undefined,
  cutoff: number,
): boolean {
  return !holder || holder.status === 'offline' || holder.last_seen_at <= cutoff
}

/** The reason of every requeue the sweeper makes. */
export const SILENT_REASON = 'worker_silent' satisfies RequeueReason

/** How the sweeper requeues an orphaned batch or shard: one failed attempt, with this reason and text. */
export function silentRequeue(workerId: string | null): { reason: typeof SILENT_REASON; error: string } {
  return { reason: SILENT_REASON, error: `worker ${workerId ?? 'unknown'} went silent` }
}
