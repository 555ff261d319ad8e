import type { Deps } from '../deps'
import { type Every, every } from '../lib/clock'
import { log } from '../lib/logger'
import { onlineCutoff } from '../modules/workers/liveness'
import { removeParts } from '../modules/workers/parts'
import { joinShards } from '../modules/workers/results'
import type { PollState } from '../modules/workers/waiters'
import { batchClaimable } from '../modules/workers/waiters'
import { startInterval } from './interval'

// The sweeper (docs/api.md §7 Worker, docs/api.md §7): every SWEEP_INTERVAL_SECONDS, workers unseen for
// HEARTBEAT_TIMEOUT_SECONDS go offline and each batch they hold is requeued through the one
// requeue rule, as a failed attempt. runOnce() is one pass (tests drive it with a manual clock);
// start() runs it on an interval and returns stop(). Several instances on one database each run
// the timer; the engine lets one pass through per interval (docs/api.md §12).

export interface SweepResult {
  /** Set when the pass did nothing because the server started less than the timeout ago. */
  skipped: 'startup_grace' | null
  workers_offline: string[]
  requeued: string[]
  failed: string[]
}

export async function runOnce(deps: Deps & PollState): Promise<SweepResult> {
  deps.metrics.sweeperPasses.inc()
  const now = deps.clock.now()
  const result: SweepResult = { skipped: null, workers_offline: [], requeued: [], failed: [] }
  // Startup grace: a restarted control plane must not declare the whole fleet dead at once.
  if (now - deps.startedAt < deps.config.HEARTBEAT_TIMEOUT_SECONDS) {
    result.skipped = 'startup_grace'
    return result
  }
  const swept = await deps.store.queue.sweep(now, onlineCutoff(deps, now))
  result.workers_offline = swept.workers_offline
  for (const r of swept.requeues) {
    await removeParts(deps, r.parts)
    // A batch validated again, or a shard left with one copy (a backup may be handed out again).
    if (r.status === 'validated') batchClaimable(deps, r.batch_id, r.model)
    // docs/api.md §16: a shard copy whose other copy carries on (promoted, or the holder) was not
    // requeued: its batch is not among `requeued`.
    if (r.backup) {
      deps.metrics.shardBackups.inc({ outcome: r.backup })
      continue
    }
    deps.metrics.requeues.inc({ reason: r.reason, outcome: r.status })
    ;(r.status === 'validated' ? result.requeued : result.failed).push(r.batch_id)
  }
  // docs/api.md §16: a split batch whose last shard is in but whose parts were never joined (the
  // uploader that should have joined them died) is joined here, and what a joiner that died left
  // is removed.
  for (const batchId of await deps.store.queue.joinsDue(now)) {
    await joinShards(deps, batchId).catch((e) =>
      log.error('joining shards failed', { batch_id: batchId, error: e }),
    )
  }
  if (result.workers_offline.length || result.requeued.length || result.failed.length) {
    log.info('sweeper pass', {
      workers_offline: result.workers_offline.length,
      requeued: result.requeued,
      failed: result.failed,
    })
  }
  return result
}

/** Runs runOnce every SWEEP_INTERVAL_SECONDS until stopped (or the server shuts down). */
export function start(deps: Deps & PollState, schedule: Every = every): () => void {
  const seconds = deps.config.SWEEP_INTERVAL_SECONDS
  return startInterval(
    deps,
    { name: 'sweeper', seconds, once: 'sweeper', pass: () => runOnce(deps) },
    schedule,
  )
}
