import { describe, expect, test } from 'bun:test'
import {
  backoffDelay,
  DEFAULT_MAX_RETRY_AFTER_MS,
  manualTimers,
  retryAfterMs,
  retryDelay,
  Wakeup,
} from '../../src/daemon/backoff'

// The daemon's one retry policy and its clock (src/daemon/backoff.ts).

describe('retry policy', () => {
  test('full jitter: uniform up to min(max, base·2^n)', () => {
    const b = { baseMs: 100, maxMs: 1_000 }
    expect(backoffDelay(0, b, () => 0.999)).toBe(100)
    expect(backoffDelay(3, b, () => 0.5)).toBe(400)
    expect(backoffDelay(10, b, () => 0.999)).toBe(999)
    expect(backoffDelay(10, b, () => 0)).toBe(0)
  })

  test('a Retry-After hint replaces the backoff, capped by the policy or the default cap', () => {
    const b = { baseMs: 100, maxMs: 1_000 }
    expect(retryDelay(0, b, 250, () => 0.999)).toBe(250)
    expect(retryDelay(0, b, 3_600_000)).toBe(DEFAULT_MAX_RETRY_AFTER_MS)
    expect(retryDelay(0, { ...b, maxRetryAfterMs: 5_000 }, 3_600_000)).toBe(5_000)
    expect(retryDelay(2, b, null, () => 0.5)).toBe(200)
  })

  test('Retry-After is read as seconds or as an HTTP date', () => {
    const now = Date.parse('2026-11-23T12:00:00Z')
    expect(retryAfterMs('2', now)).toBe(2_000)
    expect(retryAfterMs('0.5', now)).toBe(500)
    expect(retryAfterMs('Mon, 23 Nov 2026 12:00:30 GMT', now)).toBe(30_000)
    expect(retryAfterMs('Mon, 23 Nov 2026 11:00:00 GMT', now)).toBe(0)
    expect(retryAfterMs('soon', now)).toBeNull()
    expect(retryAfterMs(null, now)).toBeNull()
  })
})

describe('manual timers and Wakeup', () => {
  test('a sleep ends when the clock reaches it, or when its signal aborts', async () => {
    const timers = manualTimers()
    let done = 0
    const a = timers.sleep(1_000).then(() => done++)
    const stop = new AbortController()
    const b = timers.sleep(60_000, stop.signal).then(() => done++)
    timers.advance(999)
    await Promise.resolve()
    expect(done).toBe(0)
    timers.advance(1)
    await a
    expect(done).toBe(1)
    stop.abort()
    await b
    expect(done).toBe(2)
    expect(timers.asked).toEqual([1_000, 60_000])
  })

  test('a kick ends the wait at once; a kick while nobody waits is kept for the next wait', async () => {
    const timers = manualTimers()
    const wake = new Wakeup(timers)
    const waiting = wake.wait(30_000)
    wake.kick()
    await waiting
    // Kicked before anyone waits: the next wait returns without asking the clock for anything.
    wake.kick()
    const asked = timers.asked.length
    await wake.wait(30_000)
    expect(timers.asked).toHaveLength(asked)
    // And only once: the wait after it lasts until the clock ends it.
    let over = false
    const again = wake.wait(30_000).then(() => {
      over = true
    })
    await Promise.resolve()
    expect(over).toBe(false)
    timers.advance(30_000)
    await again
    expect(over).toBe(true)
  })
})
