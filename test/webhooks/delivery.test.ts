import { afterAll, afterEach, describe, expect, test } from 'bun:test'
import { nextAttemptAt, runOnce, start } from '../../src/services/webhooks'
import { makeTestApp, type TestApp } from '../helpers/app'
import { jsonl, line, makeBatch, makeCatalogEntry, validateAll } from '../helpers/batches'
import { type MadeUser, makeUser } from '../helpers/builders'
import { startReceiver, verify } from '../helpers/receiver'

// docs/api.md §13 delivery: Standard Webhooks headers and signature (checked by the standardwebhooks
// package), at least once, the retry schedule read off the injected clock, refusal of private
// addresses after resolution (DNS rebinding), bounded concurrency and timeouts, metrics.

const half = () => 0.5
const receivers: ReturnType<typeof startReceiver>[] = []
const receiver = (...args: Parameters<typeof startReceiver>) => {
  const r = startReceiver(...args)
  receivers.push(r)
  return r
}
afterEach(() => {
  for (const r of receivers.splice(0)) r.stop()
})

async function hookFor(t: TestApp, user: MadeUser, url: string, events?: string[]) {
  const res = await t.req('POST', '/v1/webhooks', { token: user.token, body: { url, events } })
  expect(res.status).toBe(200)
  return res.body as { id: string; secret: string }
}

/** A batch of `user` that passes validation: one batch.validated event. */
async function validatedBatch(t: TestApp, user: MadeUser) {
  const entry = await makeCatalogEntry(t)
  const batch = await makeBatch(t, user, jsonl([line('a', entry.id)]))
  await validateAll(t)
  return batch.id
}

const deliveries = async (t: TestApp, user: MadeUser, hookId: string) => {
  const res = await t.req('GET', `/v1/webhooks/${hookId}/deliveries?limit=100`, { token: user.token })
  expect(res.status).toBe(200)
  return res.body.data as Record<string, unknown>[]
}

const metric = async (t: TestApp, outcome: string) => {
  const text = (await t.req('GET', '/metrics')).text
  const m = new RegExp(`^gridkeep_webhook_deliveries_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text)
  return m ? Number(m[1]) : 0
}

describe('delivery to a receiver on loopback (WEBHOOK_ALLOW_PRIVATE=true)', () => {
  const t = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'true' })
  afterAll(() => t.close())

  test('a signed Standard Webhooks POST that the standardwebhooks package verifies', async () => {
    const r = receiver()
    const user = await makeUser(t)
    const hook = await hookFor(t, user, `${r.url}/in?src=gridkeep`)
    const batchId = await validatedBatch(t, user)
    expect(await runOnce(t.deps)).toEqual(['delivered'])
    expect(r.received.length).toBe(1)
    const got = r.received[0]!
    const payload = verify(hook.secret, got, t.clock.nowMs())
    expect(payload).toEqual({
      id: got.headers['webhook-id']!,
      type: 'batch.validated',
      created_at: t.clock.now(),
      data: { id: batchId },
    })
    expect(got.headers['webhook-id']).toMatch(/^msg_/)
    expect(got.headers['webhook-timestamp']).toBe(String(t.clock.now()))
    expect(got.headers['content-type']).toBe('application/json')
    // A wrong secret does not verify: the check above is not vacuous.
    expect(() => verify(`whsec_${Buffer.alloc(24, 7).toString('base64')}`, got, t.clock.nowMs())).toThrow()
    expect(await deliveries(t, user, hook.id)).toEqual([
      {
        id: expect.stringMatching(/^whd_/),
        object: 'webhook.delivery',
        event_id: got.headers['webhook-id'],
        event_type: 'batch.validated',
        batch_id: batchId,
        attempted_at: t.clock.now(),
        outcome: 'delivered',
        status_code: 204,
        error: null,
        duration_ms: expect.any(Number),
      },
    ])
    // Delivered once: nothing is due again, however late.
    t.clock.advance(2 * 86400)
    expect(await runOnce(t.deps)).toEqual([])
    expect(r.received.length).toBe(1)
  })

  test('500 three times, then 200: the event arrives exactly when the backoff says', async () => {
    const r = receiver((n) => new Response('no', { status: n <= 3 ? 500 : 200 }))
    const user = await makeUser(t)
    const hook = await hookFor(t, user, r.url, ['batch.validated'])
    const before = { failed: await metric(t, 'failed'), delivered: await metric(t, 'delivered') }
    await validatedBatch(t, user)
    const t0 = t.clock.now()
    // No jitter (factor 1): 1 min, then 2, then 4 after each failure.
    const schedule = [t0, t0 + 60, t0 + 180, t0 + 420]
    for (const [i, at] of schedule.entries()) {
      if (i > 0) {
        t.clock.set(at - 1)
        expect(await runOnce(t.deps, { random: half })).toEqual([])
        expect(r.received.length).toBe(i)
        t.clock.set(at)
      }
      expect(await runOnce(t.deps, { random: half })).toEqual([i < 3 ? 'failed' : 'delivered'])
      expect(r.received.length).toBe(i + 1)
      expect(r.received[i]!.headers['webhook-timestamp']).toBe(String(at))
      verify(hook.secret, r.received[i]!, t.clock.nowMs())
    }
    // One event: the same webhook-id on every attempt.
    expect(new Set(r.received.map((x) => x.headers['webhook-id'])).size).toBe(1)
    const log = await deliveries(t, user, hook.id)
    expect(log.map((d) => [d.attempted_at, d.outcome, d.status_code, d.error])).toEqual([
      [schedule[3], 'delivered', 200, null],
      [schedule[2], 'failed', 500, 'HTTP 500'],
      [schedule[1], 'failed', 500, 'HTTP 500'],
      [schedule[0], 'failed', 500, 'HTTP 500'],
    ])
    expect(await metric(t, 'failed')).toBe(before.failed + 3)
    expect(await metric(t, 'delivered')).toBe(before.delivered + 1)
  })

  test('a receiver that never succeeds: 12 attempts over the documented schedule, then gave_up', async () => {
    const r = receiver(() => new Response(null, { status: 503 }))
    const user = await makeUser(t)
    const hook = await hookFor(t, user, r.url, ['batch.validated'])
    const gaveUp = await metric(t, 'gave_up')
    await validatedBatch(t, user)
    const t0 = t.clock.now()
    const outcomes: string[] = []
    for (
      let at: number | null = t0;
      at !== null;
      at = nextAttemptAt(t0, outcomes.length, t.clock.now(), half)
    ) {
      t.clock.set(at)
      outcomes.push(...(await runOnce(t.deps, { random: half })))
    }
    expect(outcomes).toEqual([...Array(11).fill('failed'), 'gave_up'])
    const minutes = (await deliveries(t, user, hook.id))
      .map((d) => ((d.attempted_at as number) - t0) / 60)
      .reverse()
    // docs/guide.md "Webhooks": 0, 1, 3, 7, 15, 31, 63 min, 2 h 7, 4 h 15, 8 h 31, 14 h 31, 20 h 31.
    expect(minutes).toEqual([0, 1, 3, 7, 15, 31, 63, 127, 255, 511, 871, 1231])
    expect(await metric(t, 'gave_up')).toBe(gaveUp + 1)
    t.clock.advance(86400)
    expect(await runOnce(t.deps)).toEqual([])
    expect(r.received.length).toBe(12)
  })

  test('jitter stays within ±20% and no attempt is scheduled past 24 h', () => {
    expect(nextAttemptAt(0, 1, 0, () => 0)).toBe(48)
    expect(nextAttemptAt(0, 1, 0, () => 0.999999)).toBe(72)
    expect(nextAttemptAt(0, 20, 10_000, () => 0.5)).toBe(10_000 + 6 * 3600)
    expect(nextAttemptAt(0, 11, 80_000, () => 0.5)).toBeNull()
    for (let i = 0; i < 200; i++) {
      const at = nextAttemptAt(0, 3, 1000, Math.random)!
      expect(at).toBeGreaterThanOrEqual(1000 + 192)
      expect(at).toBeLessThanOrEqual(1000 + 288)
    }
  })

  test('the delivery connects to the resolved address and keeps the name in Host', async () => {
    const r = receiver()
    const user = await makeUser(t)
    const asked: string[] = []
    const system = t.deps.resolveHost
    t.deps.resolveHost = async (host) => {
      asked.push(host)
      return host === 'receiver.example.test' ? ['127.0.0.1'] : system(host)
    }
    try {
      const hook = await hookFor(t, user, `http://receiver.example.test:${r.port}/x`)
      await validatedBatch(t, user)
      expect(await runOnce(t.deps)).toEqual(['delivered'])
      expect(asked).toEqual(['receiver.example.test'])
      expect(r.received[0]!.host).toBe(`receiver.example.test:${r.port}`)
      verify(hook.secret, r.received[0]!, t.clock.nowMs())
    } finally {
      t.deps.resolveHost = system
    }
  })

  test('a receiver that does not answer times out; the API answers meanwhile', async () => {
    const slow = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_TIMEOUT_SECONDS: '1' })
    try {
      let release: () => void = () => {}
      const held = new Promise<void>((resolve) => {
        release = resolve
      })
      const r = receiver(async () => {
        await held
        return new Response(null, { status: 200 })
      })
      const user = await makeUser(slow)
      const hook = await hookFor(slow, user, r.url, ['batch.validated'])
      await validatedBatch(slow, user)
      const pass = runOnce(slow.deps)
      await r.waitFor(1)
      // The delivery is in flight and held by the receiver: the API answers all the same.
      expect((await slow.req('GET', '/v1/webhooks', { token: user.token })).status).toBe(200)
      expect((await slow.req('GET', '/v1/batches', { token: user.token })).status).toBe(200)
      expect(await pass).toEqual(['failed'])
      release()
      const [attempt] = await deliveries(slow, user, hook.id)
      expect(attempt).toMatchObject({ outcome: 'failed', status_code: null, error: 'timed out after 1 s' })
    } finally {
      slow.close()
    }
  })

  test('WEBHOOK_CONCURRENCY bounds the attempts in flight; start() refills its slots until nothing is due', async () => {
    const bounded = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_CONCURRENCY: '2' })
    try {
      let inFlight = 0
      let most = 0
      const r = receiver(async () => {
        most = Math.max(most, ++inFlight)
        await Bun.sleep(20)
        inFlight--
        return new Response(null, { status: 200 })
      })
      const user = await makeUser(bounded)
      await hookFor(bounded, user, r.url, ['batch.validated'])
      for (let i = 0; i < 9; i++) await validatedBatch(bounded, user)
      expect(await runOnce(bounded.deps)).toEqual(['delivered', 'delivered'])
      expect(most).toBe(2)
      // The loop: a timer the test fires itself.
      let fire: () => unknown = () => {}
      const stop = start(bounded.deps, (_ms, fn) => {
        fire = fn
        return () => {}
      })
      // Fired once, the loop refills its slots as attempts settle: a burst is not one lease a second.
      fire()
      await r.waitFor(9)
      await stop()
      expect(most).toBe(2)
      expect(new Set(r.received.map((x) => x.headers['webhook-id'])).size).toBe(9)
    } finally {
      bounded.close()
    }
  })
})

describe('refused addresses at delivery (WEBHOOK_ALLOW_PRIVATE=false)', () => {
  const t = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'false' })
  afterAll(() => t.close())

  test('DNS rebinding: a name public at creation and loopback at delivery is refused, logged, never contacted', async () => {
    const r = receiver()
    let address = '93.184.215.14'
    t.deps.resolveHost = async () => [address]
    const user = await makeUser(t)
    const hook = await hookFor(t, user, `http://rebind.example.test:${r.port}/`, ['batch.validated'])
    address = '127.0.0.1'
    const refusedBefore = await metric(t, 'refused')
    const batchId = await validatedBatch(t, user)
    expect(await runOnce(t.deps, { random: half })).toEqual(['refused'])
    expect(r.received).toEqual([])
    const [attempt] = await deliveries(t, user, hook.id)
    expect(attempt).toMatchObject({
      outcome: 'refused',
      status_code: null,
      batch_id: batchId,
      event_type: 'batch.validated',
    })
    expect(attempt!.error).toContain('127.0.0.1')
    expect(await metric(t, 'refused')).toBe(refusedBefore + 1)
    // Refused attempts follow the same schedule; each one is refused again.
    t.clock.advance(60)
    expect(await runOnce(t.deps, { random: half })).toEqual(['refused'])
    expect(r.received).toEqual([])
    // A name that no longer resolves is a failed attempt, not a refusal.
    t.deps.resolveHost = async () => {
      throw new Error('ENOTFOUND')
    }
    t.clock.advance(120)
    expect(await runOnce(t.deps, { random: half })).toEqual(['failed'])
    const [last] = await deliveries(t, user, hook.id)
    expect(last).toMatchObject({
      outcome: 'failed',
      error: expect.stringContaining('cannot resolve rebind.example.test'),
    })
  })

  test('a resolver that never answers holds a slot no longer than WEBHOOK_TIMEOUT_SECONDS', async () => {
    const slow = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'false', WEBHOOK_TIMEOUT_SECONDS: '1' })
    try {
      let hang = false
      slow.deps.resolveHost = async () => (hang ? new Promise<string[]>(() => {}) : ['93.184.215.14'])
      const user = await makeUser(slow)
      const hook = await hookFor(slow, user, 'http://stuck.example.test/', ['batch.validated'])
      hang = true
      await validatedBatch(slow, user)
      expect(await runOnce(slow.deps)).toEqual(['failed'])
      const [attempt] = await deliveries(slow, user, hook.id)
      expect(attempt).toMatchObject({
        outcome: 'failed',
        error: 'cannot resolve stuck.example.test: timed out',
      })
    } finally {
      slow.close()
    }
  })
})
