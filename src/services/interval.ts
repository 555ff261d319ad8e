import type { Deps } from '../deps'
import { type Every, every } from '../lib/clock'
import { log } from '../lib/logger'

// The background loops' timer (docs/api.md §12): the sweeper, the retention pass and the webhook
// delivery loop each run a pass every N seconds, log a pass that fails and keep the timer, and
// stop when the server begins to shut down. A loop that runs once per interval across every
// instance sharing the database names its tryRunEvery key in `once`.

export interface IntervalLoop {
  /** Names the loop in the log: "<name> pass failed". */
  name: string
  /** The period of the timer. */
  seconds: number
  /** One pass. A pass that throws is logged; the timer is kept. */
  pass: () => Promise<unknown>
  /**
   * The store's tryRunEvery key: one pass per interval across every instance (docs/api.md §12),
   * with a second of slack so that timers a little early do not skip a whole interval.
   */
  once?: string
}

/** `pass`, with a failure logged as "<name> pass failed" instead of thrown. */
export function guarded(name: string, pass: () => Promise<unknown>): () => Promise<void> {
  return async () => {
    try {
      await pass()
    } catch (e) {
      log.error(`${name} pass failed`, { error: e instanceof Error ? e : String(e) })
    }
  }
}

/** Runs `loop.pass` every `loop.seconds` until the returned stop() (or the server shuts down). */
export function startInterval(
  deps: Pick<Deps, 'store' | 'clock' | 'shutdown'>,
  loop: IntervalLoop,
  schedule: Every = every,
): () => void {
  const { once, seconds } = loop
  const pass = once
    ? async () => {
        if (await deps.store.queue.tryRunEvery(once, deps.clock.now(), Math.max(1, seconds - 1)))
          await loop.pass()
      }
    : loop.pass
  const stop = schedule(seconds * 1000, guarded(loop.name, pass))
  deps.shutdown.signal.addEventListener('abort', stop, { once: true })
  return stop
}
