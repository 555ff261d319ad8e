import { afterAll, expect, test } from 'bun:test'
import { start } from '../../src/services/retention'
import { start as startSweeper } from '../../src/services/sweeper'
import { makeTestApp, type TestApp } from '../helpers/app'
import { uploadForm } from '../helpers/batches'
import { blobExists } from '../helpers/blobs'
import { makePersonalKey, makeUser } from '../helpers/builders'
import { capturedLogLines } from '../helpers/secrets'

// The retention pass's loop (docs/api.md §15): one pass per SWEEP_INTERVAL_SECONDS across the instances
// (its own maintenance row, apart from the sweeper's), driven by a timer the test fires itself.

const apps: TestApp[] = []
afterAll(() => {
  for (const a of apps) a.close()
})
const fresh = (env: Record<string, string> = {}) => {
  const a = makeTestApp(env)
  apps.push(a)
  return a
}

/** An upload of `token`'s that expires an hour after now. */
async function expiring(t: TestApp, token: string): Promise<string> {
  const form = uploadForm('{"custom_id":"a"}\n')
  form.append('expires_after[anchor]', 'created_at')
  form.append('expires_after[seconds]', '3600')
  const res = await t.req('POST', '/v1/files', { token, raw: form })
  expect(res.status).toBe(200)
  return res.body.id
}

test('start() runs a pass at every tick of an interval of SWEEP_INTERVAL_SECONDS, beside the sweeper', async () => {
  const t = fresh({ SWEEP_INTERVAL_SECONDS: '7' })
  const u = await makeUser(t)
  const { key } = await makePersonalKey(t, u)
  const first = await expiring(t, key)
  t.clock.advance(3600)
  const timer = handTimer()
  const sweeperTimer = handTimer()
  const stop = start(t.deps, timer.every)
  const stopSweeper = startSweeper(t.deps, sweeperTimer.every)
  expect(timer.intervalMs).toBe(7000)
  // The sweeper's pass at the same moment does not take the retention pass's turn.
  await sweeperTimer.tick()
  await timer.tick()
  expect(await blobExists(t.deps, first)).toBe(false)

  stop()
  stopSweeper()
  expect(timer.stopped).toBe(true)
})

test('a tick within the interval does nothing; the next one after it deletes what is due', async () => {
  const t = fresh({ SWEEP_INTERVAL_SECONDS: '60' })
  const u = await makeUser(t)
  const { key } = await makePersonalKey(t, u)
  const timer = handTimer()
  const stop = start(t.deps, timer.every)
  await timer.tick() // the first pass, with nothing due
  const id = await expiring(t, key)
  t.clock.advance(3600)
  // Due now; a pass ran 3600 s ago, so this tick runs one.
  await timer.tick()
  expect(await blobExists(t.deps, id)).toBe(false)
  const next = await expiring(t, key)
  t.clock.advance(3600)
  // Hand the last pass a moment ago: the tick finds the interval not over and skips.
  await t.deps.store.queue.tryRunEvery('retention', t.clock.now(), 0)
  t.clock.advance(30)
  await timer.tick()
  expect(await blobExists(t.deps, next)).toBe(true)
  t.clock.advance(30)
  await timer.tick()
  expect(await blobExists(t.deps, next)).toBe(false)
  stop()
})

test('start() stops when the server begins to shut down; a failing pass is logged and the timer kept', async () => {
  const t = fresh()
  const timer = handTimer()
  start(t.deps, timer.every)
  t.clock.advance(300)
  await t.deps.store.close() // every query now throws
  const before = capturedLogLines().length
  await timer.tick()
  const logged = capturedLogLines()
    .slice(before)
    .map((l) => JSON.parse(l))
  expect(logged.filter((l) => l.msg === 'retention pass failed')).toHaveLength(1)
  expect(timer.stopped).toBe(false)
  t.deps.shutdown.abort()
  expect(timer.stopped).toBe(true)
})

/** A timer the test fires itself, for start(deps, every). */
function handTimer() {
  const timer = {
    intervalMs: 0,
    stopped: false,
    fire: (): unknown => undefined,
    tick() {
      if (timer.stopped) throw new Error('tick after stop')
      return timer.fire()
    },
    every: (ms: number, fn: () => unknown) => {
      timer.intervalMs = ms
      timer.fire = fn
      return () => {
        timer.stopped = true
      }
    },
  }
  return timer
}
