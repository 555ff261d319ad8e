import { afterAll, beforeAll, expect, test } from 'bun:test'
import { manualClock } from '../../src/lib/clock'
import { runOnce } from '../../src/services/webhooks'
import { makeTestApp, type TestApp } from '../helpers/app'
import { jsonl, line, makeBatch, makeCatalogEntry, validateAll } from '../helpers/batches'
import { makeUser } from '../helpers/builders'
import { freshPostgresUrl } from '../helpers/postgres'
import { startReceiver, verify } from '../helpers/receiver'
import { describeWith, postgres } from '../helpers/requires'

// docs/api.md §12 and §13: two instances on one PostgreSQL database deliver from one outbox. Each
// attempt is made by exactly one of them (due events are leased with FOR UPDATE SKIP LOCKED):
// every event reaches the receiver once per attempt, never twice.

const EVENTS = 20
describeWith(postgres, 'webhooks on two instances', () => {
  const clock = manualClock()
  let a: TestApp
  let b: TestApp
  beforeAll(async () => {
    const env = {
      DATABASE_URL: await freshPostgresUrl(),
      WEBHOOK_ALLOW_PRIVATE: 'true',
      WEBHOOK_CONCURRENCY: '4',
    }
    a = makeTestApp(env, { clock })
    b = makeTestApp(env, { clock })
  })
  const seen = new Map<string, number>()
  // Each event's first attempt fails (500), its second succeeds; a short wait keeps attempts overlapping.
  const receiver = startReceiver(async (_n, req) => {
    const id = req.headers.get('webhook-id')!
    seen.set(id, (seen.get(id) ?? 0) + 1)
    await Bun.sleep(5)
    return new Response(null, { status: seen.get(id) === 1 ? 500 : 200 })
  })
  afterAll(() => {
    receiver.stop()
    a.close()
    b.close()
  })

  /** Both instances deliver at the same moment until neither finds anything due. */
  async function drain() {
    const by = { a: 0, b: 0 }
    for (;;) {
      const [fromA, fromB] = await Promise.all([
        runOnce(a.deps, { random: () => 0.5 }),
        runOnce(b.deps, { random: () => 0.5 }),
      ])
      by.a += fromA.length
      by.b += fromB.length
      if (fromA.length + fromB.length === 0) return by
    }
  }

  test('two PostgreSQL instances make each attempt of each event once', async () => {
    await a.deps.store.ready()
    const user = await makeUser(a)
    const hook = await a.req('POST', '/v1/webhooks', {
      token: user.token,
      body: { url: receiver.url, events: ['batch.validated'] },
    })
    expect(hook.status).toBe(200)
    const entry = await makeCatalogEntry(a)
    const batches = new Set<string>()
    for (let i = 0; i < EVENTS; i++) batches.add((await makeBatch(a, user, jsonl([line('x', entry.id)]))).id)
    // Validated where the file was uploaded (each test app has its own DATA_DIR).
    expect((await validateAll(a)).length).toBe(EVENTS)

    const first = await drain()
    expect(first.a).toBeGreaterThan(0)
    expect(first.b).toBeGreaterThan(0)
    expect(first.a + first.b).toBe(EVENTS)
    expect(receiver.received.length).toBe(EVENTS)
    expect([...seen.values()].every((n) => n === 1)).toBe(true)

    // The retries, one minute later (the schedule without jitter), again once each.
    clock.advance(60)
    const second = await drain()
    expect(second.a + second.b).toBe(EVENTS)
    expect(seen.size).toBe(EVENTS)
    expect([...seen.values()].every((n) => n === 2)).toBe(true)
    const payloads = receiver.received.map((r) => verify(hook.body.secret, r, clock.nowMs()))
    expect(new Set(payloads.map((p) => p.data.id))).toEqual(batches)

    const log = await b.req('GET', `/v1/webhooks/${hook.body.id}/deliveries?limit=100`, { token: user.token })
    expect(log.body.data.length).toBe(2 * EVENTS)
    expect(log.body.data.filter((d: { outcome: string }) => d.outcome === 'delivered').length).toBe(EVENTS)
  })
})
