import { afterAll, describe, expect, test } from 'bun:test'
import { runOnce, start } from '../../src/services/sweeper'
import { makeTestApp, type TestApp } from '../helpers/app'
import { capturedLogLines } from '../helpers/secrets'
import {
  batchRow,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
  workerRow,
} from '../helpers/workers'

const apps: TestApp[] = []
afterAll(() => {
  for (const a of apps) a.close()
})
const fresh = (env: Record<string, string> = {}) => {
  const a = makeTestApp(env)
  apps.push(a)
  return a
}

const counter = async (t: TestApp, name: 'sweeperPasses') =>
  (await t.deps.metrics[name].get()).values[0]?.value ?? 0
const requeues = async (t: TestApp) =>
  (await t.deps.metrics.requeues.get()).values.map((v) => [v.labels.reason, v.labels.outcome, v.value])

async function setup(t: TestApp) {
  const f = await makeFleet(t)
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'sw:1' })
  const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, requests: 2 })
  const w1 = await registerWorker(t, f.key, { models: ['sw:1'] })
  const job = (await poll(t, f.key, w1))!
  expect(job.job_id).toBe(batch.id)
  return { f, batch, w1, job }
}

describe('sweeper', () => {
  test('does nothing during the startup grace, then marks silent workers offline and requeues their batches', async () => {
    const t = fresh()
    const { w1, batch } = await setup(t)
    t.clock.advance(300)
    // The worker has been silent for 300 s, but the server (re)started less than
    // HEARTBEAT_TIMEOUT_SECONDS ago.
    t.deps.startedAt = t.clock.now() - 119
    expect(await runOnce(t.deps)).toEqual({
      skipped: 'startup_grace',
      workers_offline: [],
      requeued: [],
      failed: [],
    })
    expect((await workerRow(t.deps, w1)).status).toBe('online')
    // Once the grace is over:
    t.deps.startedAt = t.clock.now() - 121
    const result = await runOnce(t.deps)
    expect(result).toEqual({ skipped: null, workers_offline: [w1], requeued: [batch.id], failed: [] })
    expect((await workerRow(t.deps, w1)).status).toBe('offline')
    expect(await batchRow(t.deps, batch.id)).toMatchObject({
      status: 'validated',
      attempts: 1,
      error: `worker ${w1} went silent`,
    })
    expect(await counter(t, 'sweeperPasses')).toBe(2)
    expect(await requeues(t)).toEqual([['worker_silent', 'validated', 1]])
    // A second pass finds nothing more to do.
    expect(await runOnce(t.deps)).toEqual({ skipped: null, workers_offline: [], requeued: [], failed: [] })
  })

  test('a worker that heartbeats in time is left alone', async () => {
    const t = fresh()
    const { f, w1, batch } = await setup(t)
    t.clock.advance(100)
    await heartbeat(t, f.key, w1, { activity: 'busy', current_job_id: batch.id })
    t.clock.advance(100)
    expect((await runOnce(t.deps)).workers_offline).toEqual([])
    expect((await batchRow(t.deps, batch.id)).status).toBe('in_progress')
  })

  test('a worker silent mid-batch: requeued, a second worker finishes it, the first can no longer upload', async () => {
    const t = fresh()
    const { f, w1, batch, job } = await setup(t)
    await t.req('POST', '/workers/progress', {
      token: f.key,
      body: { worker_id: w1, job_id: batch.id, completed_prompts: 1, failed_prompts: 0 },
    })
    const w2 = await registerWorker(t, f.key, { models: ['sw:1'] })
    t.clock.advance(90)
    await heartbeat(t, f.key, w2)
    t.clock.advance(40)
    const swept = await runOnce(t.deps)
    expect(swept.workers_offline).toEqual([w1])
    expect(swept.requeued).toEqual([batch.id])
    expect((await batchRow(t.deps, batch.id)).request_counts_completed).toBe(0)

    const again = (await poll(t, f.key, w2))!
    expect(again.job_id).toBe(batch.id)
    const done = await upload(
      t,
      f.key,
      { job_id: batch.id, worker_id: w2, assignment_id: again.assignment_id, completed: 2, failed: 0 },
      `${okLine('req-1')}\n${okLine('req-2')}\n`,
    )
    expect(done.status).toBe(200)
    expect(await batchRow(t.deps, batch.id)).toMatchObject({
      status: 'completed',
      attempts: 1,
      request_counts_completed: 2,
    })

    // The first worker comes back and tries to deliver its stale run.
    await heartbeat(t, f.key, w1)
    const late = await upload(
      t,
      f.key,
      { job_id: batch.id, worker_id: w1, assignment_id: job.assignment_id },
      `${okLine('req-1')}\n${okLine('req-2')}\n`,
    )
    expect(late.status).toBe(403)
    expect((await batchRow(t.deps, batch.id)).output_file_id).toBe(done.body.output_file_id)
  })

  test('requeues through the one path: the last attempt is terminal', async () => {
    const t = fresh({ MAX_BATCH_ATTEMPTS: '1' })
    const { batch } = await setup(t)
    t.clock.advance(200)
    expect((await runOnce(t.deps)).failed).toEqual([batch.id])
    expect(await batchRow(t.deps, batch.id)).toMatchObject({
      status: 'failed',
      attempts: 1,
      request_counts_failed: 2,
      completed_at: t.clock.now(),
    })
    expect(await requeues(t)).toEqual([['worker_silent', 'failed', 1]])
  })

  test('status is checked at read time: a silent worker lists as offline before any sweep', async () => {
    const t = fresh()
    const { f, w1 } = await setup(t)
    const list = async () =>
      (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data
    expect((await list())[0]).toMatchObject({ id: w1, status: 'online' })
    t.clock.advance(120)
    expect((await list())[0]).toMatchObject({ id: w1, status: 'offline' })
    expect((await workerRow(t.deps, w1)).status).toBe('online')
  })

  test('start() runs a pass at every tick of an interval of SWEEP_INTERVAL_SECONDS, until stopped', async () => {
    const t = fresh({ SWEEP_INTERVAL_SECONDS: '7' })
    const { w1, batch } = await setup(t)
    t.clock.advance(300)
    const timer = handTimer()
    const stop = start(t.deps, timer.every)
    expect(timer.intervalMs).toBe(7000)
    expect(await counter(t, 'sweeperPasses')).toBe(0)
    await timer.tick()
    expect(await counter(t, 'sweeperPasses')).toBe(1)
    expect((await workerRow(t.deps, w1)).status).toBe('offline')
    expect((await batchRow(t.deps, batch.id)).status).toBe('validated')
    // A tick before the interval has passed since the last pass (anywhere: docs/api.md §12) does nothing.
    t.clock.advance(2)
    await timer.tick()
    expect(await counter(t, 'sweeperPasses')).toBe(1)
    t.clock.advance(5)
    await timer.tick()
    expect(await counter(t, 'sweeperPasses')).toBe(2)
    // The event that would cause another pass is the timer firing; stop() cancels it.
    expect(timer.stopped).toBe(false)
    stop()
    expect(timer.stopped).toBe(true)
  })

  test('start() stops when the server begins to shut down', async () => {
    const t = fresh()
    const timer = handTimer()
    start(t.deps, timer.every)
    expect(timer.stopped).toBe(false)
    t.deps.shutdown.abort()
    expect(timer.stopped).toBe(true)
  })

  test('a pass that throws is logged and the loop keeps its timer', async () => {
    const t = fresh()
    const timer = handTimer()
    const stop = start(t.deps, timer.every)
    t.clock.advance(300)
    await t.deps.store.close() // every query now throws
    const before = capturedLogLines().length
    await timer.tick()
    const logged = capturedLogLines()
      .slice(before)
      .map((l) => JSON.parse(l))
    expect(logged.filter((l) => l.msg === 'sweeper pass failed')).toHaveLength(1)
    expect(timer.stopped).toBe(false)
    stop()
  })
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
