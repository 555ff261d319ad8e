// Time comes from an injected clock so tests never sleep through a 120 s timeout (STYLE example 9).

export interface Clock {
  /** Unix seconds. */
  now(): number
  /** Unix milliseconds. */
  nowMs(): number
}

export const systemClock: Clock = {
  now: () => Math.floor(Date.now() / 1000),
  nowMs: () => Date.now(),
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
    advance: (s) => {
      ms += s * 1000
    },
    set: (s) => {
      ms = s * 1000
    },
  }
}
