// The daemon's one retry policy and its clock.
//
// Waits are exponential backoff with full jitter (the AWS architecture blog's "full jitter"): the
// n-th wait is uniform in [0, min(max, base·2^n)], so a fleet retrying after a shared outage
// spreads out. A server's Retry-After hint replaces the backoff, capped at `maxRetryAfterMs` (a
// misconfigured server must not park a worker for an hour). The executor (inference requests) and
// the agent (control-plane calls) both wait through retryDelay().
//
// Time comes from an injected Timers (ARCHITECTURE.md rule 9): the real one in production, a manual one
// in tests, which then observe a wait being asked for instead of sleeping through it.

export interface Backoff {
  baseMs: number
  maxMs: number
  /** Longest wait a Retry-After hint may ask for. */
  maxRetryAfterMs?: number
}

export const DEFAULT_MAX_RETRY_AFTER_MS = 60_000

export const backoffDelay = (attempt: number, b: Backoff, random = Math.random) =>
  Math.round(random() * Math.min(b.maxMs, b.baseMs * 2 ** attempt))

/** The wait before retry `attempt + 1`: the server's hint (capped) when it gave one, else backoff. */
export function retryDelay(attempt: number, b: Backoff, hintMs: number | null, random = Math.random): number {
  if (hintMs !== null) return Math.min(hintMs, b.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS)
  return backoffDelay(attempt, b, random)
}

/** Retry-After in seconds or as an HTTP date; null when absent or unreadable. */
export function retryAfterMs(header: string | null, now = Date.now()): number | null {
  if (!header) return null
  const secs = Number(header)
  if (Number.isFinite(secs)) return Math.max(0, secs * 1000)
  const at = Date.parse(header)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

export interface Timers {
  /** Unix milliseconds. */
  nowMs(): number
  /** Resolves after `ms`, or early (without error) when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>
}

export const realTimers: Timers = {
  nowMs: () => Date.now(),
  sleep(ms, signal) {
    if (signal?.aborted || ms <= 0) return Promise.resolve()
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      signal?.addEventListener('abort', done, { once: true })
    })
  },
}

export interface ManualTimers extends Timers {
  /** Moves time on; every sleep that ends by then resolves. */
  advance(ms: number): void
  /** The lengths of the sleeps asked for so far, in order. */
  readonly asked: number[]
}

/** Timers that move only when told to (tests). */
export function manualTimers(startMs = 1_800_000_000_000): ManualTimers {
  let now = startMs
  const sleepers = new Set<{ at: number; wake: () => void }>()
  const asked: number[] = []
  return {
    nowMs: () => now,
    asked,
    sleep(ms, signal) {
      asked.push(ms)
      if (signal?.aborted || ms <= 0) return Promise.resolve()
      return new Promise((resolve) => {
        const sleeper = {
          at: now + ms,
          wake: () => {
            sleepers.delete(sleeper)
            signal?.removeEventListener('abort', sleeper.wake)
            resolve()
          },
        }
        sleepers.add(sleeper)
        signal?.addEventListener('abort', sleeper.wake, { once: true })
      })
    },
    advance(ms) {
      now += ms
      for (const s of [...sleepers]) if (s.at <= now) s.wake()
    },
  }
}

/**
 * A sleep that can be cut short: wait() resolves after `ms`, at a stop, or at the next kick().
 * A kick() while nobody waits is kept for the next wait(), so a wake-up is never lost.
 */
export class Wakeup {
  private kicked = false
  private current: AbortController | null = null

  constructor(private readonly timers: Timers) {}

  async wait(ms: number, stop?: AbortSignal): Promise<void> {
    if (this.kicked) {
      this.kicked = false
      return
    }
    const ac = new AbortController()
    this.current = ac
    try {
      await this.timers.sleep(ms, stop ? AbortSignal.any([stop, ac.signal]) : ac.signal)
    } finally {
      if (this.current === ac) this.current = null
      this.kicked = false
    }
  }

  kick() {
    if (this.current) this.current.abort()
    else this.kicked = true
  }
}

/**
 * The restart back-off of the daemon's engine processes (engines/child.ts), both kinds: after an
 * end nobody asked for, the next start waits 1 s, doubling at each further end up to 30 s; a run
 * that lasted a minute starts the count over. After GIVE_UP_AFTER ends in a row (about 2 minutes
 * of failing starts) the engine is not restarted on its own any more: the next start is asked for
 * (a load). Decided here, once.
 */
export class RestartBackoff {
  static readonly MIN_MS = 1000
  static readonly MAX_MS = 30_000
  static readonly STABLE_MS = 60_000
  static readonly GIVE_UP_AFTER = 8
  /** Ends in a row, each after a run shorter than STABLE_MS. */
  private ends = 0
  private endedAtMs = Number.NEGATIVE_INFINITY

  /** A run that began at `startedMs` ended unasked at `nowMs`. */
  ended(startedMs: number, nowMs: number) {
    this.ends = nowMs - startedMs >= RestartBackoff.STABLE_MS ? 1 : this.ends + 1
    this.endedAtMs = nowMs
  }

  /** How many ends in a row the next wait counts. */
  get count() {
    return this.ends
  }

  /** Whether restarting on its own is over: GIVE_UP_AFTER ends in a row. */
  get exhausted() {
    return this.ends >= RestartBackoff.GIVE_UP_AFTER
  }

  /** The wait after the last end (0 before any). */
  get delayMs() {
    return this.ends === 0 ? 0 : Math.min(RestartBackoff.MAX_MS, RestartBackoff.MIN_MS * 2 ** (this.ends - 1))
  }

  /** What is left of that wait at `nowMs`. */
  leftMs(nowMs: number) {
    return Math.max(0, this.endedAtMs + this.delayMs - nowMs)
  }
}

/**
 * Calls `fn` every `ms` on the clock of `timers` until stop() (or `signal`): an interval tests move
 * with a manual clock instead of waiting it out.
 */
export function every(timers: Timers, ms: number, fn: () => void, signal?: AbortSignal): { stop(): void } {
  const ac = new AbortController()
  const over = signal ? AbortSignal.any([signal, ac.signal]) : ac.signal
  void (async () => {
    for (;;) {
      await timers.sleep(ms, over)
      if (over.aborted) return
      fn()
    }
  })()
  return { stop: () => ac.abort() }
}
