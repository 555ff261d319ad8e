import type { Deps } from '../../deps'
import type { WorkerPrincipal } from '../../domain/principal'
import { claimBatch, type Job } from './claim'
import { loadCatalogue, loadWorkerView, matchesFor } from './matching'
import { ownWorker } from './ownership'

// POST /workers/poll with `wait_seconds` (docs/api.md §7, ext): with nothing to claim, the request is
// held until a batch may have become claimable, then the ordinary claim runs again. The signal is
// a hint and the table is the truth (ARCHITECTURE.md rule 15): the validator and the requeue path call
// notify(model) whenever a batch becomes `validated`; the held polls whose worker can serve that
// model (the catalogue slugs it matches, worked out when it began to wait) re-run claimBatch(), and
// those that still find nothing keep waiting until their deadline. So one new batch wakes only
// its candidates, not the whole fleet. A heartbeat that changes what a worker hosts wakes that
// worker's held poll (workerChanged), which then claims or waits with the new set. A poll without
// wait_seconds answers at once, as before.

type Wake = (why: 'notified' | 'ended') => void

/** The polls held on this server (one per Deps: per-server state never lives in a module). */
export class PollWaiters {
  /** Each held poll: its worker, and the batch models (`batches.model` slugs) that worker can serve. */
  private readonly waiting = new Map<Wake, { workerId: string; models: ReadonlySet<string> }>()
  /** Held polls woken by notify() so far (tests observe who was woken). */
  wakes = 0

  /** A batch of `model` became `validated` (validation passed, or a requeue): its candidates look again. */
  notify(model: string | null) {
    if (model === null) return
    for (const [wake, w] of [...this.waiting]) if (w.models.has(model)) this.wake(wake)
  }

  /** The worker's hosted models changed (a heartbeat): its held polls work out what they can serve. */
  workerChanged(workerId: string) {
    for (const [wake, w] of [...this.waiting]) if (w.workerId === workerId) this.wake(wake)
  }

  private wake(wake: Wake) {
    this.wakes++
    wake('notified')
  }

  /** Held polls right now (tests observe a poll being held instead of sleeping). */
  get size() {
    return this.waiting.size
  }

  /**
   * Resolves 'notified' at the next notify(), or 'ended' after `ms` or when a signal aborts.
   * Registration is synchronous: a notify() after the caller's claim cannot be missed.
   */
  wait(
    ms: number,
    workerId: string,
    models: ReadonlySet<string>,
    signals: AbortSignal[],
  ): Promise<'notified' | 'ended'> {
    return new Promise((resolve) => {
      const done: Wake = (why) => {
        this.waiting.delete(done)
        clearTimeout(timer)
        for (const s of signals) s.removeEventListener('abort', end)
        resolve(why)
      }
      const end = () => done('ended')
      const timer = setTimeout(end, ms)
      for (const s of signals) s.addEventListener('abort', end, { once: true })
      this.waiting.set(done, { workerId, models })
      if (signals.some((s) => s.aborted)) end()
    })
  }
}

/**
 * The claim of POST /workers/poll, held up to `waitSeconds` (≤ 30, checked by the schema) while
 * nothing is claimable. Ends with {job: null} at the deadline, at server shutdown, or when the
 * caller hangs up (`request`: a batch must never be claimed for a poller that is gone).
 */
export async function pollForJob(
  deps: Deps,
  principal: WorkerPrincipal,
  workerId: string,
  waitSeconds = 0,
  request?: AbortSignal,
): Promise<{ job: Job | null }> {
  const first = await claimBatch(deps, principal, workerId)
  if (first.job || waitSeconds <= 0) return first
  const signals = request ? [deps.shutdown.signal, request] : [deps.shutdown.signal]
  const deadline = performance.now() + waitSeconds * 1000
  for (;;) {
    const left = deadline - performance.now()
    if (left <= 0) return { job: null }
    const models = await servable(deps, principal, workerId)
    if ((await deps.pollWaiters.wait(left, workerId, models, signals)) === 'ended') return { job: null }
    const again = await claimBatch(deps, principal, workerId)
    if (again.job) return again
  }
}

/** The batch models this worker can serve now (claimBatch's candidates). */
async function servable(deps: Deps, principal: WorkerPrincipal, workerId: string): Promise<Set<string>> {
  const catalogue = await loadCatalogue(deps)
  const view = await loadWorkerView(deps, await ownWorker(deps, principal, workerId))
  return new Set(matchesFor(view, catalogue).flatMap((m) => catalogue.slugsOf(m.entry)))
}

/**
 * A batch of `model` became `validated` (validation passed, or a requeue): held polls here look
 * again, and the other instances sharing the database are told (docs/api.md §12 signals).
 */
export function batchClaimable(deps: Deps, batchId: string, model: string | null) {
  if (model === null) return
  deps.pollWaiters.notify(model)
  deps.store.signals.publish({ kind: 'claimable', batch_id: batchId, model }).catch(() => {})
}
