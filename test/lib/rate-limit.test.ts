import { describe, expect, test } from 'bun:test'
import { manualClock } from '../../src/lib/clock'
import type { AppError } from '../../src/lib/errors'
import { RateLimiter } from '../../src/lib/rate-limit'
import { sqliteLimits } from '../../src/store/sqlite/limits'
import { makeTestApp } from '../helpers/app'
import { uniqueEmail } from '../helpers/builders'

// docs/api.md §3 rate limits, in bounded memory: a client cycling keys (e.g. emails on forgot-password)
// cannot grow the limiter past `maxKeys` per rule, and at the bound nobody gets through uncounted.

/** The 429 thrown by take(), or undefined when the hit was allowed. */
function attempt(rl: RateLimiter, rule: string, key: string, limit: number, windowSeconds: number) {
  try {
    rl.take(rule, key, limit, windowSeconds)
    return undefined
  } catch (e) {
    return e as AppError
  }
}

describe('RateLimiter', () => {
  test('allows `limit` hits per sliding window, then a 429 AppError with Retry-After', () => {
    const clock = manualClock()
    const rl = new RateLimiter(clock)
    rl.take('r', 'k', 2, 60)
    clock.advance(20)
    rl.take('r', 'k', 2, 60)
    const err = attempt(rl, 'r', 'k', 2, 60)
    expect(err?.status).toBe(429)
    expect(err?.headers['retry-after']).toBe('40')
    rl.take('r', 'other', 2, 60)
    rl.take('another rule', 'k', 2, 60) // rules count apart
    clock.advance(41)
    rl.take('r', 'k', 2, 60) // the first hit left the window
    expect(attempt(rl, 'r', 'k', 2, 60)?.status).toBe(429) // the second has not
  })

  test('a limit of 0 turns the rule off and tracks nothing', () => {
    const rl = new RateLimiter(manualClock())
    for (let i = 0; i < 100; i++) rl.take('r', 'k', 0, 60)
    expect(rl.trackedKeys()).toBe(0)
  })

  test('keys whose hits have all left the window are forgotten as later hits arrive', () => {
    const clock = manualClock()
    const rl = new RateLimiter(clock)
    for (let i = 0; i < 1000; i++) {
      rl.take('forgot', `user-${i}@example.test`, 5, 3600)
      clock.advance(1)
    }
    expect(rl.trackedKeys()).toBe(1000)
    clock.advance(3600 - 1000 + 499) // the first 500 keys' only hit is now at least an hour old
    rl.take('forgot', 'late@example.test', 5, 3600)
    expect(rl.trackedKeys()).toBe(1000 - 500 + 1)
  })

  test('memory is bounded: a client cycling keys never grows a rule past maxKeys', () => {
    const clock = manualClock()
    const rl = new RateLimiter(clock, { maxKeys: 100 })
    let refused = 0
    for (let i = 0; i < 10_000; i++) {
      if (attempt(rl, 'forgot', `cycle-${i}@example.test`, 5, 3600)) refused++
      expect(rl.trackedKeys()).toBeLessThanOrEqual(100)
      clock.advance(0.01)
    }
    expect(rl.trackedKeys()).toBe(100)
    expect(refused).toBe(10_000 - 100)
  })

  test('at the bound a limited client stays limited, and a newcomer waits for the oldest key to expire', () => {
    const clock = manualClock()
    const rl = new RateLimiter(clock, { maxKeys: 50 })
    for (let i = 0; i < 2; i++) rl.take('forgot', 'victim@example.test', 2, 3600)
    expect(attempt(rl, 'forgot', 'victim@example.test', 2, 3600)?.status).toBe(429)
    clock.advance(10)
    // A flood of other keys fills the table and keeps coming.
    for (let i = 0; i < 5_000; i++) attempt(rl, 'forgot', `flood-${i}@example.test`, 2, 3600)
    expect(rl.trackedKeys()).toBe(50)
    // The limited client was not evicted to make room: still limited, its Retry-After intact.
    const victim = attempt(rl, 'forgot', 'victim@example.test', 2, 3600)
    expect([victim?.status, victim?.headers['retry-after']]).toEqual([429, String(3600 - 10)])
    // A newcomer is refused (never counted nowhere) until the oldest key's window ends.
    const newcomer = attempt(rl, 'forgot', 'newcomer@example.test', 2, 3600)
    expect([newcomer?.status, newcomer?.headers['retry-after']]).toEqual([429, String(3600 - 10)])
    // Other rules have their own table: a flood of forgot-password does not lock logins out.
    expect(attempt(rl, 'login', 'someone@example.test:127.0.0.1', 10, 60)).toBeUndefined()
    clock.advance(3600 - 10)
    // The victim's window has passed: its key is forgotten and it may ask again, taking the slot.
    expect(attempt(rl, 'forgot', 'victim@example.test', 2, 3600)).toBeUndefined()
    expect(attempt(rl, 'forgot', 'newcomer@example.test', 2, 3600)?.headers['retry-after']).toBe('10')
    clock.advance(10)
    expect(attempt(rl, 'forgot', 'newcomer@example.test', 2, 3600)).toBeUndefined()
    expect(rl.trackedKeys()).toBe(3) // the victim and the newcomer, and the login rule's key
  })

  test('a limited key keeps its own window while others come and go', () => {
    const clock = manualClock()
    const rl = new RateLimiter(clock, { maxKeys: 10 })
    rl.take('r', 'a', 1, 60)
    for (let s = 0; s < 59; s++) {
      clock.advance(1)
      attempt(rl, 'r', `other-${s}`, 1, 60)
      expect(attempt(rl, 'r', 'a', 1, 60)?.status).toBe(429)
    }
    clock.advance(1)
    expect(attempt(rl, 'r', 'a', 1, 60)).toBeUndefined()
  })
})

test('forgot-password: cycling emails stays within the bound, and a limited email stays limited', async () => {
  const t = makeTestApp({ RATE_LIMIT_FORGOT_PER_HOUR: '2', DATABASE_URL: '' })
  try {
    // The SQLite engine's limiter, with a small bound.
    const limiter = new RateLimiter(t.clock, { maxKeys: 20 })
    t.deps.store = { ...t.deps.store, limits: sqliteLimits(limiter) }
    const forgot = (email: string) => t.req('POST', '/v1/auth/forgot-password', { body: { email } })
    const victim = uniqueEmail()
    expect((await forgot(victim)).status).toBe(202)
    expect((await forgot(victim)).status).toBe(202)
    expect((await forgot(victim)).status).toBe(429)
    const statuses: number[] = []
    for (let i = 0; i < 200; i++) statuses.push((await forgot(`cycle-${i}@example.test`)).status)
    expect(limiter.trackedKeys()).toBe(20)
    expect(statuses.filter((s) => s === 202)).toHaveLength(19)
    expect(statuses.filter((s) => s === 429)).toHaveLength(181)
    expect((await forgot(victim)).status).toBe(429)
  } finally {
    t.close()
  }
})
