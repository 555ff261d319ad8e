import type { Deps } from '../../deps'
import { covers } from '../../domain/capabilities'
import type { MatchState } from './match-cache'
import type { PlacementState } from './placement'

// The polls held on this server (docs/api.md §7 wait_seconds, see poll-wait.ts), apart from the
// poll so that the claim, the service and the loops wake them without importing the poll.

type Wake = (why: 'notified' | 'ended') => void

/** The polls held on this server (one per server, made by src/compose.ts). */
/**
 * The batch models (`batches.model` slugs) a held poll's worker can serve, each with what the worker
 * can do with it (docs/api.md §7 Poll rule 7: the entry's capabilities AND its engine's).
 */
export type ServableModels = ReadonlyMap<string, readonly string[]>

export class PollWaiters {
  /** Each held poll: its worker, and the models that worker can serve. */
  private readonly waiting = new Map<Wake, { workerId: string; models: ServableModels; mayPull: boolean }>()
  /** Held polls woken by notify() so far (tests observe who was woken). */
  wakes = 0
  /** The workers with a poll under way on this server (held, or being answered), and how many. */
  private readonly polling = new Map<string, number>()

  /** A poll of `workerId` begins; the returned function ends it. */
  begin(workerId: string): () => void {
    this.polling.set(workerId, (this.polling.get(workerId) ?? 0) + 1)
    let ended = false
    return () => {
      if (ended) return
      ended = true
      const n = this.polling.get(workerId)! - 1
      if (n > 0) this.polling.set(workerId, n)
      else this.polling.delete(workerId)
    }
  }

  /**
   * docs/api.md §7 placement: whether `workerId` has a poll under way here — alive and asking for
   * work, so a batch of a model it has loaded is its to take.
   */
  isPolling(workerId: string): boolean {
    return this.polling.has(workerId)
  }

  /**
   * A batch of `model` became `validated` (validation passed, or a requeue): its candidates look
   * again — with the batch's `needs` known, only those that can meet them (docs/api.md §7 Poll rule 7)
   * — and so do the polls of workers that cannot serve it but may download (pull_models).
   */
  notify(model: string | null, needs?: readonly string[]) {
    if (model === null) return
    // Downloads are asked only when no online worker serves the model: one held here that can
    // means no downloader needs waking (and a popular model's batches never wake them all).
    const served = [...this.waiting.values()].some((w) => w.models.has(model))
    for (const [wake, w] of [...this.waiting]) {
      const can = w.models.get(model)
      if (can ? needs === undefined || covers(can, needs) : w.mayPull && !served) this.wake(wake)
    }
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
    models: ServableModels,
    signals: AbortSignal[],
    mayPull = false,
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
      this.waiting.set(done, { workerId, models, mayPull })
      if (signals.some((s) => s.aborted)) end()
    })
  }
}

/**
 * This server's held polls, placement view and kept matches, made by src/compose.ts (ARCHITECTURE.md
 * rule 2).
 */
export interface PollState extends PlacementState, MatchState {
  /** Polls held by `wait_seconds`, woken when a batch becomes validated (docs/api.md §7). */
  pollWaiters: PollWaiters
}

/**
 * A batch of `model` became `validated` (validation passed, or a requeue): held polls here look
 * again, and the other instances sharing the database are told (docs/api.md §12 signals). `needs`:
 * the batch's, when the caller knows them (else every poll that can serve the model looks).
 */
export function batchClaimable(
  deps: Deps & PollState,
  batchId: string,
  model: string | null,
  needs?: readonly string[],
) {
  if (model === null) return
  deps.pollWaiters.notify(model, needs)
  deps.store.signals
    .publish({ kind: 'claimable', batch_id: batchId, model, ...(needs && { needs: [...needs] }) })
    .catch(() => {})
}
