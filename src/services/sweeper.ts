import { and, eq, inArray, isNull, lte, or } from 'drizzle-orm'
import { batchAssignments, batches, modelPulls, workers } from '../db/schema'
import { writeTx } from '../db/tx'
import type { Deps } from '../deps'
import { type Every, every } from '../lib/clock'
import { log } from '../lib/logger'
import { requeueBatch } from '../modules/workers/requeue'

// The sweeper (SPEC §3 Worker, API.md §7): every SWEEP_INTERVAL_SECONDS, workers unseen for
// HEARTBEAT_TIMEOUT_SECONDS go offline and each batch they hold is requeued through the one
// requeue path, as a failed attempt. runOnce() is one pass (tests drive it with a manual clock);
// start() runs it on an interval and returns stop().

export interface SweepResult {
  /** Set when the pass did nothing because the server started less than the timeout ago. */
  skipped: 'startup_grace' | null
  workers_offline: string[]
  requeued: string[]
  failed: string[]
}

export function runOnce(deps: Deps): SweepResult {
  deps.metrics.sweeperPasses.inc()
  const now = deps.clock.now()
  const result: SweepResult = { skipped: null, workers_offline: [], requeued: [], failed: [] }
  // Startup grace: a restarted control plane must not declare the whole fleet dead at once.
  if (now - deps.startedAt < deps.config.HEARTBEAT_TIMEOUT_SECONDS) {
    result.skipped = 'startup_grace'
    return result
  }
  const cutoff = now - deps.config.HEARTBEAT_TIMEOUT_SECONDS
  writeTx(deps.db, (tx) => {
    result.workers_offline = tx
      .update(workers)
      .set({ status: 'offline' })
      .where(and(eq(workers.status, 'online'), lte(workers.last_seen_at, cutoff)))
      .returning({ id: workers.id })
      .all()
      .map((w) => w.id)
    // Every in_progress batch whose holder is not live: silent, offline, or no longer there.
    const orphans = tx
      .select({ batch_id: batches.id, worker_id: batchAssignments.worker_id })
      .from(batches)
      .leftJoin(batchAssignments, eq(batchAssignments.batch_id, batches.id))
      .leftJoin(workers, eq(workers.id, batchAssignments.worker_id))
      .where(
        and(
          eq(batches.status, 'in_progress'),
          or(isNull(workers.id), eq(workers.status, 'offline'), lte(workers.last_seen_at, cutoff)),
        ),
      )
      .all()
    for (const o of orphans) {
      const outcome = requeueBatch(
        tx,
        deps,
        o.batch_id,
        'worker_silent',
        `worker ${o.worker_id ?? 'unknown'} went silent`,
        now,
      )
      if (outcome?.status === 'validated') result.requeued.push(o.batch_id)
      else if (outcome) result.failed.push(o.batch_id)
    }
    // An offline worker downloads nothing for us: let another be asked (API.md §7 pull_models).
    if (result.workers_offline.length) {
      for (let i = 0; i < result.workers_offline.length; i += 500) {
        tx.delete(modelPulls)
          .where(inArray(modelPulls.worker_id, result.workers_offline.slice(i, i + 500)))
          .run()
      }
    }
  })
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
export function start(deps: Deps, schedule: Every = every): () => void {
  const pass = () => {
    try {
      runOnce(deps)
    } catch (e) {
      log.error('sweeper pass failed', { error: e instanceof Error ? e : String(e) })
    }
  }
  const stop = schedule(deps.config.SWEEP_INTERVAL_SECONDS * 1000, pass)
  deps.shutdown.signal.addEventListener('abort', stop, { once: true })
  return stop
}
