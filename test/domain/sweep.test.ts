import { describe, expect, test } from 'bun:test'
import { goesOffline, holderSilent, SILENT_REASON, silentRequeue } from '../../src/domain/sweep'

describe('the sweep rules', () => {
  test('an online worker last seen at or before the cutoff goes offline; after it, it stays', () => {
    expect(goesOffline({ status: 'online', last_seen_at: 100 }, 100)).toBe(true)
    expect(goesOffline({ status: 'online', last_seen_at: 99 }, 100)).toBe(true)
    expect(goesOffline({ status: 'online', last_seen_at: 101 }, 100)).toBe(false)
    expect(goesOffline({ status: 'offline', last_seen_at: 1 }, 100)).toBe(false)
  })

  test('a holder is silent when gone, offline, or seen at or before the cutoff', () => {
    expect(holderSilent(undefined, 100)).toBe(true)
    expect(holderSilent(null, 100)).toBe(true)
    expect(holderSilent({ status: 'offline', last_seen_at: 500 }, 100)).toBe(true)
    expect(holderSilent({ status: 'online', last_seen_at: 100 }, 100)).toBe(true)
    expect(holderSilent({ status: 'online', last_seen_at: 101 }, 100)).toBe(false)
  })

  test('the requeue reason and error text name the silent worker', () => {
    expect(SILENT_REASON).toBe('worker_silent')
    expect(silentRequeue('wrk_1')).toEqual({ reason: 'worker_silent', error: 'worker wrk_1 went silent' })
    expect(silentRequeue(null)).toEqual({ reason: 'worker_silent', error: 'worker unknown went silent' })
  })
})
