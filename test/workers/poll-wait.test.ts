import { afterAll, describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import type { Job } from '../../src/modules/workers/claim'
import { buildRequest, makeTestApp, readRes, type TestApp } from '../helpers/app'
import { makeBatch, validateAll } from '../helpers/batches'
import { rowsOf } from '../helpers/rows'
import {
  batchRow,
  heartbeat,
  inputLine,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// POST /workers/poll with wait_seconds (docs/api.md §7, ext). A held poll is observed through
// deps.pollWaiters (the event of being held), never by sleeping and hoping.

const t = makeTestApp()
afterAll(() => t.close())

/** A heartbeated worker hosting `name`. */
async function hostWorker(app: TestApp, key: string, name: string) {
  const wid = await registerWorker(app, key)
  expect((await heartbeat(app, key, wid, { inventory: [inventoryItem(name)] })).status).toBe(200)
  return wid
}

/** Sends a poll with wait_seconds; resolves with its response. */
function heldPoll(app: TestApp, key: string, workerId: string, wait: number, signal?: AbortSignal) {
  const req = buildRequest('http://localhost', 'POST', '/workers/poll', {
    token: key,
    body: { worker_id: workerId, wait_seconds: wait },
  })
  return app.app.handle(signal ? new Request(req, { signal }) : req).then(readRes)
}

/** Resolves once `n` polls are held on the server. */
async function heldCount(app: TestApp, n: number) {
  while (app.deps.pollWaiters.size !== n) await new Promise((r) => setImmediate(r))
}

describe('POST /workers/poll wait_seconds', () => {
  test('a held poll answers as soon as a matching batch is validated', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'wait-validate:7b' })
    const wid = await hostWorker(t, f.key, 'wait-validate:7b')
    const pending = heldPoll(t, f.key, wid, 30)
    await heldCount(t, 1)
    const batch = await makeBatch(t, f.user, `${inputLine('a', entry.id)}\n`, {
      endpoint: '/v1/chat/completions',
    })
    await validateAll(t)
    const res = await pending
    expect(res.status).toBe(200)
    expect((res.body.job as Job).job_id).toBe(batch.id)
    expect((await batchRow(t.deps, batch.id)).status).toBe('in_progress')
    expect(t.deps.pollWaiters.size).toBe(0)
  })

  test('a held poll answers as soon as a batch is requeued', async () => {
    const f = await makeFleet(t)
    await makeCatalogEntry(t.deps, { id: 'wait-requeue-q4km', runtime_model_id: 'wait-requeue:7b' })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: 'wait-requeue-q4km' })
    const first = await hostWorker(t, f.key, 'wait-requeue:7b')
    const second = await hostWorker(t, f.key, 'wait-requeue:7b')
    const job = (await poll(t, f.key, first))!
    expect(job.job_id).toBe(batch.id)

    const pending = heldPoll(t, f.key, second, 30)
    await heldCount(t, 1)
    const failed = await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: {
        job_id: batch.id,
        worker_id: first,
        error: 'GPU fell off the bus',
        assignment_id: job.assignment_id,
      },
    })
    expect(failed.body.status).toBe('validated')
    const res = await pending
    expect((res.body.job as Job).job_id).toBe(batch.id)
    expect(await batchRow(t.deps, batch.id)).toMatchObject({ status: 'in_progress', attempts: 1 })
  })

  test('a batch only wakes the held polls of workers that can serve it', async () => {
    const f = await makeFleet(t)
    const mine = await makeCatalogEntry(t.deps, { runtime_model_id: 'wait-mine:7b' })
    const other = await makeCatalogEntry(t.deps, { runtime_model_id: 'wait-other:7b' })
    const wid = await hostWorker(t, f.key, 'wait-mine:7b')
    const pending = heldPoll(t, f.key, wid, 30)
    await heldCount(t, 1)
    const wakes = t.deps.pollWaiters.wakes
    const otherBatch = await makeBatch(t, f.user, `${inputLine('a', other.id)}\n`, {
      endpoint: '/v1/chat/completions',
    })
    await validateAll(t)
    // Validated, and this poll was not woken for it: still held, the batch still waiting.
    expect((await batchRow(t.deps, otherBatch.id)).status).toBe('validated')
    expect(t.deps.pollWaiters.wakes).toBe(wakes)
    expect(t.deps.pollWaiters.size).toBe(1)
    const myBatch = await makeBatch(t, f.user, `${inputLine('b', mine.id)}\n`, {
      endpoint: '/v1/chat/completions',
    })
    await validateAll(t)
    expect(((await pending).body.job as Job).job_id).toBe(myBatch.id)
    expect(t.deps.pollWaiters.wakes).toBe(wakes + 1)
    const { db, tables } = rowsOf(t.deps)
    await db.delete(tables.batches).where(eq(tables.batches.id, otherBatch.id))
  })

  test('a held poll that finds nothing when woken keeps waiting, then ends with job: null', async () => {
    const f = await makeFleet(t)
    await makeCatalogEntry(t.deps, { id: 'wait-taken-q4km', runtime_model_id: 'wait-taken:7b' })
    const first = await hostWorker(t, f.key, 'wait-taken:7b')
    const second = await hostWorker(t, f.key, 'wait-taken:7b')
    const a = heldPoll(t, f.key, first, 0.3)
    const b = heldPoll(t, f.key, second, 0.3)
    await heldCount(t, 2)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: 'wait-taken-q4km' })
    t.deps.pollWaiters.notify('wait-taken-q4km')
    // Both woken; one claims it, the other is held again until its deadline.
    const [ra, rb] = await Promise.all([a, b])
    const jobs = [ra.body.job, rb.body.job]
    expect(jobs.filter(Boolean).map((j) => (j as Job).job_id)).toEqual([batch.id])
    expect(jobs).toContain(null)
    expect(t.deps.pollWaiters.size).toBe(0)
  })

  test('a poller that hangs up is never given a batch', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'wait-hangup:7b' })
    const wid = await hostWorker(t, f.key, 'wait-hangup:7b')
    const caller = new AbortController()
    const pending = heldPoll(t, f.key, wid, 30, caller.signal).catch((e) => e)
    await heldCount(t, 1)
    caller.abort()
    await heldCount(t, 0)
    const batch = await makeBatch(t, f.user, `${inputLine('a', entry.id)}\n`, {
      endpoint: '/v1/chat/completions',
    })
    await validateAll(t)
    expect((await batchRow(t.deps, batch.id)).status).toBe('validated')
    await pending
  })

  test('without wait_seconds (or 0) a poll answers at once, as for older daemons', async () => {
    const f = await makeFleet(t)
    const wid = await hostWorker(t, f.key, 'wait-none:7b')
    expect(await poll(t, f.key, wid)).toBeNull()
    expect((await heldPoll(t, f.key, wid, 0)).body).toEqual({ job: null })
    expect(t.deps.pollWaiters.size).toBe(0)
  })

  test('bad wait_seconds → 400 in the error envelope', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    for (const wait_seconds of [-1, 31, 'soon', null, 1e9]) {
      const res = await t.req('POST', '/workers/poll', {
        token: f.key,
        body: { worker_id: wid, wait_seconds },
      })
      expect(res.status).toBe(400)
      expect(res.body.error.type).toBe('invalid_request_error')
    }
  })

  test('server shutdown ends held polls with job: null', async () => {
    const own = makeTestApp()
    try {
      const f = await makeFleet(own)
      const wid = await hostWorker(own, f.key, 'wait-shutdown:7b')
      const pending = heldPoll(own, f.key, wid, 30)
      await heldCount(own, 1)
      own.deps.shutdown.abort()
      expect((await pending).body).toEqual({ job: null })
      expect(own.deps.pollWaiters.size).toBe(0)
    } finally {
      own.close()
    }
  })
})

test('a heartbeat that changes what the worker hosts lets its held poll claim at once', async () => {
  const f = await makeFleet(t)
  await makeCatalogEntry(t.deps, { id: 'wait-late-q4km', runtime_model_id: 'wait-late:7b' })
  const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: 'wait-late-q4km' })
  // Held while the worker hosts something else; the batch is not for it yet.
  const wid = await hostWorker(t, f.key, 'wait-early:7b')
  const pending = heldPoll(t, f.key, wid, 30)
  await heldCount(t, 1)
  // The model lands on the worker (a pull, a digest found): the next heartbeat says so.
  const hb = await heartbeat(t, f.key, wid, { inventory: [inventoryItem('wait-late:7b')] })
  expect(hb.status).toBe(200)
  expect(((await pending).body.job as Job).job_id).toBe(batch.id)
})

describe('POST /workers/poll: downloads asked at once (docs/api.md §7 pull_models)', () => {
  test('a held poll of an idle worker that may download answers the ask as soon as a batch waits for a model nobody holds', async () => {
    const app = makeTestApp()
    try {
      const f = await makeFleet(app)
      const entry = await makeCatalogEntry(app.deps, { runtime_model_id: 'held-pull:1', size_gb: 5 })
      const wid = await registerWorker(app, f.key, { max_download_gb: 10, models: [] })
      expect((await heartbeat(app, f.key, wid)).body.pull_models).toEqual([])
      const pending = heldPoll(app, f.key, wid, 30)
      await heldCount(app, 1)
      // A batch for the model nobody holds is validated: the held poll wakes and answers the ask,
      // no heartbeat needed (a poll that did not wake would hold for its 30 s).
      await makeBatch(app, f.user, `${inputLine('a', entry.id)}\n`, { endpoint: '/v1/chat/completions' })
      await validateAll(app)
      const res = await pending
      expect(res.status).toBe(200)
      expect(res.body.job).toBeNull()
      expect(res.body.pull_models.map((p: { catalogue_id: string }) => p.catalogue_id)).toEqual([entry.id])
      // The ask is the one the heartbeat would have made: one at a time, so a heartbeat now asks nothing more.
      expect((await heartbeat(app, f.key, wid)).body.pull_models).toEqual([])
      // Downloaded: a poll that comes before the heartbeat carrying the new inventory asks nothing
      // again (the ask stays, as verifying, until the inventory lists the model).
      const done = await app.req('POST', '/workers/model-progress', {
        token: f.key,
        body: { worker_id: wid, model: 'held-pull:1', status: 'completed' },
      })
      expect(done.status).toBe(200)
      expect(
        (await app.req('POST', '/workers/poll', { token: f.key, body: { worker_id: wid } })).body,
      ).toEqual({
        job: null,
      })
      // With the model in its inventory, the worker claims the batch.
      await heartbeat(app, f.key, wid, { inventory: [inventoryItem('held-pull:1')] })
      expect((await poll(app, f.key, wid))?.model).toBe('held-pull:1')
    } finally {
      app.close()
    }
  })

  test('a batch of a model a held poll serves wakes that poll only, not the workers that may download', async () => {
    const app = makeTestApp()
    try {
      const f = await makeFleet(app)
      const entry = await makeCatalogEntry(app.deps, { runtime_model_id: 'served:1', size_gb: 5 })
      const host = await hostWorker(app, f.key, 'served:1')
      const downloader = await registerWorker(app, f.key, { max_download_gb: 10, models: [] })
      expect((await heartbeat(app, f.key, downloader)).status).toBe(200)
      const controller = new AbortController()
      const idle = heldPoll(app, f.key, downloader, 30, controller.signal)
      await heldCount(app, 1)
      const pending = heldPoll(app, f.key, host, 30)
      await heldCount(app, 2)
      const wakes = app.deps.pollWaiters.wakes
      const batch = await makeBatch(app, f.user, `${inputLine('a', entry.id)}\n`, {
        endpoint: '/v1/chat/completions',
      })
      await validateAll(app)
      expect((await pending).body.job.job_id).toBe(batch.id)
      // One wake: the host's. The downloader's poll still waits (nothing for it to fetch).
      expect(app.deps.pollWaiters.wakes).toBe(wakes + 1)
      expect(app.deps.pollWaiters.size).toBe(1)
      controller.abort()
      await idle.catch(() => {})
    } finally {
      app.close()
    }
  })

  test('a worker that may not download is not woken by a batch it cannot serve; a plain poll carries no ask', async () => {
    const app = makeTestApp()
    try {
      const f = await makeFleet(app)
      const entry = await makeCatalogEntry(app.deps, { runtime_model_id: 'no-pull:1', size_gb: 5 })
      const wid = await hostWorker(app, f.key, 'other-model:1')
      const controller = new AbortController()
      const pending = heldPoll(app, f.key, wid, 30, controller.signal)
      await heldCount(app, 1)
      const wakes = app.deps.pollWaiters.wakes
      await makeBatch(app, f.user, `${inputLine('a', entry.id)}\n`, { endpoint: '/v1/chat/completions' })
      await validateAll(app)
      // The validation's notify has run (validateAll awaited it): nobody was woken, the poll still waits.
      expect(app.deps.pollWaiters.wakes).toBe(wakes)
      expect(app.deps.pollWaiters.size).toBe(1)
      controller.abort()
      await pending.catch(() => {})
      const res = await app.req('POST', '/workers/poll', { token: f.key, body: { worker_id: wid } })
      expect(res.body).toEqual({ job: null })
    } finally {
      app.close()
    }
  })
})
