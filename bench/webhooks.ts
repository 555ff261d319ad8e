// Webhook delivery (docs/api.md §13) on SQLite: N outbox events drained by the delivery loop at
// WEBHOOK_CONCURRENCY 8 to a receiver on loopback, vs a bare baseline in the same run (the same N
// signed POSTs from 8 fetch loops, no outbox, no lease, no log of attempts). And what the outbox
// adds to a batch transition: finishValidations with one listening webhook vs with none.
//
//   bun run bench/webhooks.ts            (5,000 events)
//   bun run bench/webhooks.ts --quick    (1,000 events)

import { createHmac } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer } from '../src/compose'
import { loadConfig } from '../src/config'
import { newId } from '../src/lib/ids'
import { setLogSink } from '../src/lib/logger'
import { start } from '../src/services/webhooks'
import { fmt, quick } from './lib/load'

const EVENTS = quick ? 1_000 : 5_000
const CONCURRENCY = 8

setLogSink(() => {})
const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-webhooks-'))
const config = loadConfig({
  DATA_DIR: dir,
  JWT_SECRET: 'bench-secret-bench-secret-bench-secret-0123',
  WEBHOOK_ALLOW_PRIVATE: 'true',
  WEBHOOK_CONCURRENCY: String(CONCURRENCY),
})
const deps = createServer(config)
let received = 0
let onReceived = () => {}
const receiver = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  async fetch(req) {
    await req.arrayBuffer()
    received++
    onReceived()
    return new Response(null, { status: 204 })
  },
})
const target = `http://127.0.0.1:${receiver.port}/hook`

const now = deps.clock.now()
deps.sqlite.exec(`INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
  VALUES ('user_hooked', 'h@x.test', 'h', 'H', ${now}, ${now}), ('user_plain', 'p@x.test', 'h', 'P', ${now}, ${now})`)
const secret = `whsec_${Buffer.alloc(24, 9).toString('base64')}`
await deps.store.webhooks.createWebhook({
  id: newId('wh_'),
  user_id: 'user_hooked',
  url: target,
  secret,
  events: ['batch.validated'],
  created_at: now,
})
const insert =
  deps.sqlite.prepare(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window,
  status, created_at, updated_at) VALUES (?, ?, 'file-x', '/v1/chat/completions', '24h', 'validating', ?, ?)`)
const passed = { passed: true, model: 'm', request_lines: 1, errors_total: 0, errors: [] }

/** Validation finishing for EVENTS batches of `user`: µs per transition. */
async function transitions(user: string) {
  const ids = Array.from({ length: EVENTS }, () => newId('batch_'))
  deps.sqlite.transaction(() => {
    for (const id of ids) insert.run(id, user, now, now)
  })()
  const started = performance.now()
  for (const id of ids) await deps.store.batches.finishValidations([{ batchId: id, result: passed }], now)
  return ((performance.now() - started) * 1000) / EVENTS
}

// Alternated, the median of 3 each: the machine's noise is larger than the difference.
const plainRuns: number[] = []
const hookedRuns: number[] = []
for (let i = 0; i < 3; i++) {
  plainRuns.push(await transitions('user_plain'))
  hookedRuns.push(await transitions('user_hooked'))
}
const median = (xs: number[]) => xs.sort((a, b) => a - b)[1]!
const plain = median(plainRuns)
const hooked = median(hookedRuns)
console.log(
  `batch transition (finishValidations): ${fmt(hooked, 1)} µs with a listening webhook vs ${fmt(plain, 1)} µs without (${fmt(hooked / plain, 2)}×)`,
)

// Three runs of transitions with a webhook left one event each in the outbox.
const DELIVERIES = 3 * EVENTS

// The delivery loop as the server runs it, its timer fired once: it refills its slots itself.
let started = performance.now()
let fire: () => unknown = () => {}
const stop = start(deps, (_ms, fn) => {
  fire = fn
  return () => {}
})
const allReceived = new Promise<void>((resolve) => {
  onReceived = () => received === DELIVERIES && resolve()
})
fire()
await allReceived
await stop()
const drained = performance.now() - started

// The bare baseline: the same number of signed POSTs, 8 loops of fetch.
const key = Buffer.from(secret.slice(6), 'base64')
let next = 0
started = performance.now()
await Promise.all(
  Array.from({ length: CONCURRENCY }, async () => {
    while (next < DELIVERIES) {
      const id = `msg_${next++}`
      const ts = Math.floor(Date.now() / 1000)
      const body = JSON.stringify({ id, type: 'batch.validated', created_at: ts, data: { id: 'batch_x' } })
      const signature = `v1,${createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64')}`
      const res = await fetch(target, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'webhook-id': id,
          'webhook-timestamp': String(ts),
          'webhook-signature': signature,
        },
        body,
      })
      await res.arrayBuffer()
    }
  }),
)
const bare = performance.now() - started
const rate = (ms: number) => (DELIVERIES / ms) * 1000
console.log(
  `delivery of ${fmt(DELIVERIES)} events at concurrency ${CONCURRENCY}: ${fmt(rate(drained))}/s through the outbox vs ${fmt(rate(bare))}/s bare fetch loops (${fmt((rate(drained) / rate(bare)) * 100)} %)`,
)

receiver.stop(true)
await deps.store.close()
rmSync(dir, { recursive: true, force: true })
