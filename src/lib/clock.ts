// Time comes from an injected clock so tests never sleep through a 120 s timeout (ARCHITECTURE.md rule 9).

export interface Clock {
  /** Unix seconds. */
  now(): number
  /** Unix milliseconds. */
  nowMs(): number
  /** Milliseconds from an arbitrary origin that never go backwards: for measuring durations. */
  monotonicMs(): number
}

export const systemClock: Clock = {
  now: () => Math.floor(Date.now() / 1000),
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
}

/** Calls `fn` every `ms` milliseconds until the returned stop() is called. */
export type Every = (ms: number, fn: () => unknown) => () => void

/** The background loops' timer (setInterval); tests hand a loop one they fire themselves. */
export const every: Every = (ms, fn) => {
  const timer = setInterval(fn, ms)
  return () => clearInterval(timer)
}

export interface ManualClock extends Clock {
  advance(seconds: number): void
  set(unixSeconds: number): void
}

/** A clock that moves only when told to. */
export function manualClock(startSeconds = 1_800_000_000): ManualClock {
  let ms = startSeconds * 1000
  return {
    now: () => Math.floor(ms / 1000),
    nowMs: () => ms,
    monotonicMs: () => ms,
    advance: (s) => {
      ms += s * 1000
    },
    set: (s) => {
      ms = s * 1000
    },
  }
}
