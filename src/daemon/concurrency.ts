// The requests the daemon keeps in flight at its engine: one limit shared by every job it runs, so
// the next job's requests take the slots the previous job's last requests free (ARCHITECTURE.md rule 20:
// concurrency found, not configured).
//
// `auto` (the default) finds the engine's capacity by measuring, window by window, the requests
// completed per second and their latency at the current limit:
// - Start: the engine's own figure when it gives one (llama.cpp `GET /props` total_slots), else 8.
// - Slow start: while doubling the limit raises throughput by at least half of what doubling
//   promises, double again (TCP's slow start).
// - Plateau: when a raise brings no throughput (same throughput from more requests in flight: by
//   Little's law their latency grew), the extra requests only queue in the engine: go back to the
//   last limit that paid and hold there. Every HOLD_WINDOWS windows one small step up is tried
//   (capacity may have grown); it stays only if throughput follows (additive increase).
// - Overload: a 429, a 503 or a timeout cuts the limit to BACKOFF of itself at once (multiplicative
//   decrease), once per round: answers to requests sent before the cut say nothing of the new limit.
//   Growth after that is additive only.
// - Latency that grows without throughput while holding, DRIFT_WINDOWS windows in a row (the
//   engine got slower, someone else is using it), steps the limit down by DRIFT_DOWN.
// - The window after any cut is not a measure (it drains requests sent at the old limit), nor is a
//   window in which the daemon did not fill its limit (the end of a batch, nothing to run).
// - Never above `max` (--max-concurrency) nor below 1.
// A number (--concurrency N) pins the limit: nothing moves it.
//
// Time comes from the injected clock: the decisions are a function of the samples and their times.

export type ConcurrencySetting = number | 'auto'

/** One answered (or timed-out) attempt at the engine. */
export interface Sample {
  /** When the attempt was sent (clock ms). */
  startedAtMs: number
  /** 429, 503 or a timeout: the engine is over its capacity. */
  overload: boolean
}

export interface ControllerOptions {
  setting: ConcurrencySetting
  max: number
  nowMs: () => number
  /** Called with every change of the limit, and why. */
  onChange?: (limit: number, was: number, reason: string) => void
  /** Shortest measurement window (default 300 ms). */
  minWindowMs?: number
}

export const AUTO_START = 8
const MIN_WINDOW_MS = 300
/**
 * Slow start decides on doublings, which a short window measures well enough; every window spent
 * below capacity costs requests the engine could have served, so these windows are shorter.
 */
const SLOW_START_WINDOW_SHARE = 1 / 3
/** A window also waits for this many completions per request of the limit (each slot turns over). */
const TURNS_PER_WINDOW = 2
const MIN_COMPLETIONS = 8
/** A window counts only when the daemon kept at least this share of its limit in flight. */
const SATURATED = 0.8
/** A raise pays when throughput grew by at least this share of what the raise promised. */
const PAYOFF = 0.5
/** Throughput that did not grow by more than this share is flat. */
const FLAT = 1.1
const BACKOFF = 0.75
const DRIFT_LATENCY = 1.5
const DRIFT_DOWN = 0.9
const DRIFT_WINDOWS = 3
const HOLD_WINDOWS = 10

interface Window {
  limit: number
  throughput: number
  latencyMs: number
}

export class ConcurrencyController {
  readonly auto: boolean
  private current: number
  private readonly max: number
  private readonly minWindowMs: number
  private readonly nowMs: () => number
  private readonly onChange: (limit: number, was: number, reason: string) => void

  /** Before the first decision the engine's figure may still set the start. */
  private decided = false
  private slowStart = true
  /** The window before the last raise (to compare against), null when holding. */
  private beforeRaise: Window | null = null
  /** The first full window at the held limit (to notice latency drifting up). */
  private held: Window | null = null
  private heldWindows = 0
  /** Windows in a row whose latency drifted up without throughput. */
  private drifting = 0
  /** After a cut the next window still drains the requests sent at the old limit: not a measure. */
  private draining = false
  /** Overload answers to requests sent before this time are not news. */
  private cutAtMs = Number.NEGATIVE_INFINITY

  // The current window.
  private windowStart: number
  private completions = 0
  private latencySum = 0
  private inFlight = 0
  private inFlightSince: number
  private inFlightArea = 0

  constructor(o: ControllerOptions) {
    this.auto = o.setting === 'auto'
    this.max = Math.max(1, o.max)
    this.current = Math.min(this.max, o.setting === 'auto' ? AUTO_START : o.setting)
    this.minWindowMs = o.minWindowMs ?? MIN_WINDOW_MS
    this.nowMs = o.nowMs
    this.onChange = o.onChange ?? (() => {})
    this.windowStart = this.inFlightSince = o.nowMs()
  }

  get limit() {
    return this.current
  }

  /** The engine's own figure of its parallel slots: the start, unless measuring has begun. */
  engineReports(slots: number) {
    if (!this.auto || this.decided || !(slots >= 1)) return
    // Past its slots an engine that reports them (llama-server) only queues: probe up in small steps.
    this.slowStart = false
    this.set(Math.floor(slots), 'the engine reports its slots')
    this.resetWindow(this.nowMs())
  }

  /** The requests in flight now (the limiter calls it on every change). */
  inFlightNow(n: number) {
    const now = this.nowMs()
    this.inFlightArea += this.inFlight * (now - this.inFlightSince)
    this.inFlightSince = now
    this.inFlight = n
  }

  /** One attempt's answer (or timeout). */
  sample(s: Sample) {
    if (!this.auto) return
    const now = this.nowMs()
    if (s.overload) {
      if (s.startedAtMs < this.cutAtMs) return
      this.decided = true
      this.slowStart = false
      this.beforeRaise = null
      this.held = null
      this.cutAtMs = now
      this.set(Math.floor(this.current * BACKOFF), 'the engine is overloaded (429, 503 or a timeout)')
      this.resetWindow(now)
      return
    }
    this.completions++
    this.latencySum += now - s.startedAtMs
    const elapsed = now - this.windowStart
    const enough = Math.max(MIN_COMPLETIONS, TURNS_PER_WINDOW * this.current)
    const shortest = this.slowStart ? this.minWindowMs * SLOW_START_WINDOW_SHARE : this.minWindowMs
    if (elapsed >= shortest && this.completions >= enough) this.closeWindow(now, elapsed)
  }

  private closeWindow(now: number, elapsed: number) {
    this.inFlightNow(this.inFlight)
    const saturated = this.inFlightArea / elapsed >= SATURATED * this.current
    const w: Window = {
      limit: this.current,
      throughput: (this.completions * 1000) / elapsed,
      latencyMs: this.latencySum / this.completions,
    }
    this.resetWindow(now)
    if (this.draining) this.draining = false
    else if (saturated) this.decide(w)
  }

  private resetWindow(now: number) {
    this.inFlightNow(this.inFlight)
    this.windowStart = now
    this.completions = 0
    this.latencySum = 0
    this.inFlightArea = 0
  }

  private decide(w: Window) {
    this.decided = true
    const before = this.beforeRaise
    if (before) {
      this.beforeRaise = null
      const promised = w.limit / before.limit - 1
      if (w.throughput >= before.throughput * (1 + PAYOFF * promised)) {
        this.held = null
        this.raise(w, this.slowStart ? 'throughput rises with it (slow start)' : 'throughput rises with it')
        return
      }
      // The same throughput from more requests in flight: by Little's law their latency grew, and
      // the extra requests only wait in the engine's queue.
      this.slowStart = false
      this.held ??= before
      this.heldWindows = 0
      this.set(before.limit, 'more requests only queued in the engine (throughput flat, latency up)')
      return
    }
    if (!this.held) {
      this.held = w
      this.heldWindows = 0
      if (this.slowStart) this.raise(w, 'throughput rises with it (slow start)')
      return
    }
    if (w.latencyMs > this.held.latencyMs * DRIFT_LATENCY && w.throughput < this.held.throughput * FLAT) {
      // One slow window is noise (a pause of the host); several in a row are a trend.
      if (++this.drifting < DRIFT_WINDOWS) return
      this.held = null
      this.drifting = 0
      this.set(Math.floor(this.current * DRIFT_DOWN), 'latency grows without throughput')
      return
    }
    this.drifting = 0
    if (++this.heldWindows >= HOLD_WINDOWS) this.raise(w, 'probing for more capacity')
  }

  private raise(w: Window, reason: string) {
    const next = this.slowStart ? this.current * 2 : this.current + Math.max(1, Math.ceil(this.current * 0.1))
    this.heldWindows = 0
    this.drifting = 0
    if (Math.min(this.max, next) === this.current) return
    this.beforeRaise = w
    this.set(next, reason)
  }

  private set(n: number, reason: string) {
    const next = Math.max(1, Math.min(this.max, n))
    if (next === this.current) return
    const was = this.current
    if (next < was) this.draining = true
    this.current = next
    this.onChange(next, was, reason)
  }
}

/**
 * The semaphore over the controller's limit, shared by every job of the daemon. Waiters are served
 * first come, first served (retries first), so a job that started reading first keeps its turn.
 */
export class RequestLimiter {
  private active = 0
  private readonly waiters: (() => void)[] = []

  constructor(readonly controller: ConcurrencyController) {}

  get inFlight() {
    return this.active
  }

  /**
   * Resolves true once a slot is ours, false if `signal` aborts first (then nothing is held).
   * A `retry` goes ahead of every new request: a line already started finishes first.
   */
  acquire(signal?: AbortSignal, o: { retry?: boolean } = {}): Promise<boolean> {
    if (signal?.aborted) return Promise.resolve(false)
    if (this.waiters.length === 0 && this.active < this.controller.limit) {
      this.take()
      return Promise.resolve(true)
    }
    return new Promise((resolve) => {
      const onAbort = () => {
        const i = this.waiters.indexOf(grant)
        if (i >= 0) this.waiters.splice(i, 1)
        resolve(false)
      }
      const grant = () => {
        signal?.removeEventListener('abort', onAbort)
        this.take()
        resolve(true)
      }
      if (o.retry) this.waiters.unshift(grant)
      else this.waiters.push(grant)
      signal?.addEventListener('abort', onAbort, { once: true })
    })
  }

  /** One attempt's answer: the controller learns from it, and a raised limit lets waiters in. */
  sample(s: Sample) {
    this.controller.sample(s)
    this.pump()
  }

  release() {
    this.active--
    this.controller.inFlightNow(this.active)
    this.pump()
  }

  /** Grants what the limit allows now (after a release, or the limit rose). */
  pump() {
    while (this.waiters.length > 0 && this.active < this.controller.limit) this.waiters.shift()!()
  }

  private take() {
    this.active++
    this.controller.inFlightNow(this.active)
  }
}

/** A pinned limiter (a job run on its own: tests, tools). */
export const fixedLimiter = (n: number) =>
  new RequestLimiter(new ConcurrencyController({ setting: n, max: n, nowMs: () => performance.now() }))
