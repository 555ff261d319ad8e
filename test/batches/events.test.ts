import { afterAll, describe, expect, test } from 'bun:test'
import { newId } from '../../src/lib/ids'
import { openStreams } from '../../src/modules/batches/events'
import { startTestServer, type TestServer } from '../helpers/app'
import { jsonl, line, makeBatch, makeCatalogEntry, makeFile } from '../helpers/batches'
import { type MadeUser, makeSuperadmin, makeUser } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'
import { openSse } from '../helpers/sse'
import { until } from '../helpers/until'
import {
  heartbeat,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// GET /v1/batches/{id}/events over a real HTTP connection (docs/api.md §6 "Events").

const s = await startTestServer({
  MAX_SSE_STREAMS_PER_USER: '2',
  SSE_PING_SECONDS: '1',
  SSE_FOLLOW_SECONDS: '1',
})
afterAll(() => s.stop())

const model = (await makeCatalogEntry(s, { id: 'events-8b-q4km' })).id
const gauge = async () => (await s.deps.metrics.sseStreamsOpen.get()).values[0]?.value ?? 0
const eventsUrl = (id: string) => `${s.url}/v1/batches/${id}/events`

/** A `validating` batch the running validator has not been told about (it waits for `created`). */
async function pendingBatch(t: TestServer, user: MadeUser, content: string) {
  const fileId = await makeFile(t, user, content)
  const id = newId('batch_')
  const now = t.clock.now()
  const { db, tables } = rowsOf(t.deps)
  await db.insert(tables.batches).values({
    id,
    user_id: user.id,
    input_file_id: fileId,
    endpoint: '/v1/chat/completions',
    completion_window: '24h',
    status: 'validating',
    created_at: now,
    updated_at: now,
  })
  return id
}

describe('a live validation', () => {
  test('status, progress, one error per stored error (≤100), done, then the server closes', async () => {
    const u = await makeUser(s)
    const lines = [line('ok', model), ...Array.from({ length: 149 }, () => '{broken'), line('ok2', model)]
    const id = await pendingBatch(s, u, jsonl(lines))
    const sse = await openSse(eventsUrl(id), u.token)
    expect(sse.response.status).toBe(200)
    expect(sse.response.headers.get('content-type')).toStartWith('text/event-stream')
    expect(await sse.next()).toEqual({ event: 'status', data: { batch_id: id, status: 'validating' } })
    s.deps.batchEvents.created(id) // wake the validator now that the client listens
    const frames = await sse.rest() // ends only because the server closes the stream
    const kinds = frames.map((f) => f.event)
    expect(kinds.filter((k) => k === 'error')).toHaveLength(100)
    expect(kinds.filter((k) => k === 'progress').length).toBeGreaterThanOrEqual(1)
    expect(kinds.at(-1)).toBe('done')
    expect(frames.find((f) => f.event === 'progress')!.data).toEqual({
      lines_read: expect.any(Number),
      errors_total: expect.any(Number),
    })
    const errors = frames.filter((f) => f.event === 'error').map((f) => f.data)
    expect(errors[0]).toEqual({ code: 'invalid_json', line: 2, field: null, message: expect.any(String) })
    expect(errors.map((e) => e.line)).toEqual(Array.from({ length: 100 }, (_, i) => i + 2))
    expect(frames.at(-1)!.data).toEqual({
      batch_id: id,
      status: 'failed',
      request_counts: { total: 0, completed: 0, failed: 0 },
      errors_total: 149,
      waiting: null,
    })
    await until('no open stream', async () => openStreams(s.deps, u.id) === 0 && (await gauge()) === 0)
    expect(s.deps.batchEvents.listenerCount(id)).toBe(0)
  })

  test('a client joining half-way receives the errors produced so far, then the rest', async () => {
    const u = await makeUser(s)
    const id = await pendingBatch(s, u, jsonl([line('a', model)]))
    const bus = s.deps.batchEvents
    bus.beginRun(id)
    bus.publish(id, { event: 'progress', data: { lines_read: 10, errors_total: 2 } })
    const e1 = { code: 'invalid_json', line: 3, field: null, message: 'm' }
    bus.publish(id, { event: 'error', data: e1 })
    const sse = await openSse(eventsUrl(id), u.token)
    const e2 = { code: 'invalid_json', line: 7, field: null, message: 'm' }
    expect((await sse.until('error')).map((f) => f.event)).toEqual(['status', 'progress', 'error'])
    bus.publish(id, { event: 'error', data: e2 })
    const done = {
      batch_id: id,
      status: 'failed',
      request_counts: { total: 0, completed: 0, failed: 0 },
      errors_total: 2,
    }
    bus.publish(id, { event: 'done', data: done })
    expect(await sse.rest()).toEqual([
      { event: 'error', data: e2 },
      { event: 'done', data: { ...done, waiting: null } },
    ])
  })

  test('a batch already past validating gets status and done at once, done with why it waits', async () => {
    const u = await makeUser(s)
    const batch = await makeBatch(s, u, jsonl([line('a', model), line('b', model)]))
    await until(
      'validation',
      async () =>
        (await s.req('GET', `/v1/batches/${batch.id}`, { token: u.token })).body.status === 'validated',
    )
    const sse = await openSse(eventsUrl(batch.id), u.token)
    expect(await sse.rest()).toEqual([
      { event: 'status', data: { batch_id: batch.id, status: 'validated' } },
      {
        event: 'done',
        data: {
          batch_id: batch.id,
          status: 'validated',
          request_counts: { total: 2, completed: 0, failed: 0 },
          errors_total: 0,
          // docs/api.md §6 `waiting`: nothing hosts this model.
          waiting: {
            reason: 'no_worker',
            message: `No online worker hosts ${model}; no worker has registered it.`,
            details: { offline_workers: 0 },
          },
        },
      },
    ])
  })
})

describe('stream lifecycle', () => {
  test('a keep-alive comment is sent on the ping interval', async () => {
    const u = await makeUser(s)
    const id = await pendingBatch(s, u, jsonl([line('a', model)]))
    const sse = await openSse(eventsUrl(id), u.token)
    expect((await sse.next())?.event).toBe('status')
    expect(await sse.next()).toEqual({ comment: 'ping' })
    sse.close()
  })

  test('a client that disconnects frees its listener, timer, slot and gauge', async () => {
    const u = await makeUser(s)
    const id = await pendingBatch(s, u, jsonl([line('a', model)]))
    const before = await gauge()
    const sse = await openSse(eventsUrl(id), u.token)
    expect((await sse.next())?.event).toBe('status')
    expect(s.deps.batchEvents.listenerCount(id)).toBe(1)
    expect(openStreams(s.deps, u.id)).toBe(1)
    expect(await gauge()).toBe(before + 1)
    sse.close()
    await until('the listener gone', () => s.deps.batchEvents.listenerCount(id) === 0)
    expect(openStreams(s.deps, u.id)).toBe(0)
    expect(await gauge()).toBe(before)
  })

  test('at most MAX_SSE_STREAMS_PER_USER streams per user: the next is a 429 in the envelope', async () => {
    const u = await makeUser(s)
    const other = await makeUser(s)
    const id = await pendingBatch(s, u, jsonl([line('a', model)]))
    const a = await openSse(eventsUrl(id), u.token)
    const b = await openSse(eventsUrl(id), u.token)
    const refused = await fetch(eventsUrl(id), { headers: { authorization: `Bearer ${u.token}` } })
    expect(refused.status).toBe(429)
    expect(refused.headers.get('retry-after')).toBeTruthy()
    expect(((await refused.json()) as any).error).toMatchObject({
      type: 'rate_limit_error',
      code: 'too_many_streams',
    })
    // Another user is not affected.
    const theirId = await pendingBatch(s, other, jsonl([line('a', model)]))
    const c = await openSse(eventsUrl(theirId), other.token)
    expect(c.response.status).toBe(200)
    // Closing one gives the slot back.
    a.close()
    await until('one open stream', () => openStreams(s.deps, u.id) === 1)
    const d = await openSse(eventsUrl(id), u.token)
    expect(d.response.status).toBe(200)
    for (const x of [b, c, d]) x.close()
  })

  test('owner or superadmin only: another user 404, no credential 401', async () => {
    const u = await makeUser(s)
    const other = await makeUser(s)
    const admin = await makeSuperadmin(s)
    const batch = await makeBatch(s, u, jsonl([line('a', model)]))
    const res = await fetch(eventsUrl(batch.id), { headers: { authorization: `Bearer ${other.token}` } })
    expect(res.status).toBe(404)
    expect(((await res.json()) as any).error.type).toBe('not_found_error')
    expect((await fetch(eventsUrl(batch.id))).status).toBe(401)
    const sse = await openSse(eventsUrl(batch.id), admin.token)
    expect(sse.response.status).toBe(200)
    expect((await sse.until('done')).at(-1)?.event).toBe('done')
    sse.close()
  })
})

describe('follow mode (docs/api.md §6 Events, ?follow=1)', () => {
  const followers = () => s.deps.batchFollowers

  test('done says why it waits; then waiting and status on each change, until the batch is terminal', async () => {
    const entry = await makeCatalogEntry(s, { runtime_model_id: 'follow:1' })
    const f = await makeFleet(s)
    const batch = await makeValidatedBatch(s.deps, { userId: f.user.id, model: entry.id, requests: 2 })
    const sse = await openSse(`${eventsUrl(batch.id)}?follow=1`, f.user.token)
    expect(sse.response.status).toBe(200)
    expect(await sse.until('done')).toEqual([
      { event: 'status', data: { batch_id: batch.id, status: 'validated' } },
      {
        event: 'done',
        data: {
          batch_id: batch.id,
          status: 'validated',
          request_counts: { total: 2, completed: 0, failed: 0 },
          errors_total: 0,
          waiting: {
            reason: 'no_worker',
            message: `No online worker hosts ${entry.id}; no worker has registered it.`,
            details: { offline_workers: 0 },
          },
        },
      },
    ])

    // A worker comes to host it: the reason changes, and nothing else is sent meanwhile.
    const wid = await registerWorker(s, f.key, { name: 'follow-box', models: ['follow:1'] })
    expect((await heartbeat(s, f.key, wid)).status).toBe(200)
    expect(await sse.until('waiting')).toEqual([
      {
        event: 'waiting',
        data: {
          batch_id: batch.id,
          waiting: {
            reason: 'queued',
            message: `Next in line for ${entry.id}; 1 online worker can serve it.`,
            details: { ahead: { batches: 0, requests: 0 }, running: { batches: 0, requests: 0 }, workers: 1 },
          },
        },
      },
    ])

    // Claimed: the status, then waiting back to null.
    const job = (await poll(s, f.key, wid))!
    expect(job.job_id).toBe(batch.id)
    expect(await sse.until('waiting')).toEqual([
      { event: 'status', data: { batch_id: batch.id, status: 'in_progress' } },
      { event: 'waiting', data: { batch_id: batch.id, waiting: null } },
    ])

    // Completed: its status, and the server closes the stream.
    const uploaded = await upload(
      s,
      f.key,
      { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id },
      `${okLine('req-1')}\n${okLine('req-2')}\n`,
    )
    expect(uploaded.status).toBe(200)
    expect(await sse.rest()).toEqual([{ event: 'status', data: { batch_id: batch.id, status: 'completed' } }])
    await until('no follower left', () => followers().streams.size === 0 && !followers().timer)
    await until('no open stream', () => openStreams(s.deps, f.user.id) === 0)
  })

  test('a batch terminal at done closes the stream there, as without follow', async () => {
    const u = await makeUser(s)
    const id = await pendingBatch(s, u, jsonl(['{broken']))
    const sse = await openSse(`${eventsUrl(id)}?follow=1`, u.token)
    expect((await sse.next())?.event).toBe('status')
    s.deps.batchEvents.created(id)
    const frames = await sse.rest()
    expect(frames.at(-1)).toMatchObject({ event: 'done', data: { status: 'failed', waiting: null } })
  })

  test('a client that goes away stops being followed; follow=0 is the old stream; another value a 400', async () => {
    const entry = await makeCatalogEntry(s, { runtime_model_id: 'follow:gone' })
    const u = await makeUser(s)
    const batch = await makeValidatedBatch(s.deps, { userId: u.id, model: entry.id })
    const sse = await openSse(`${eventsUrl(batch.id)}?follow=1`, u.token)
    expect((await sse.until('done')).map((f) => f.event)).toEqual(['status', 'done'])
    await until('followed', () => followers().streams.size === 1)
    sse.close()
    await until('no follower left', () => followers().streams.size === 0 && !followers().timer)

    const old = await openSse(`${eventsUrl(batch.id)}?follow=0`, u.token)
    expect((await old.rest()).map((f) => f.event)).toEqual(['status', 'done'])
    const bad = await fetch(`${eventsUrl(batch.id)}?follow=yes`, {
      headers: { authorization: `Bearer ${u.token}` },
    })
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as any).error.type).toBe('invalid_request_error')
  })
})

test('graceful shutdown ends open streams', async () => {
  const server = await startTestServer()
  const u = await makeUser(server)
  const id = await pendingBatch(server, u, jsonl([line('a', 'whatever')]))
  const sse = await openSse(`${server.url}/v1/batches/${id}/events`, u.token)
  expect((await sse.next())?.event).toBe('status')
  const ended = sse.rest()
  await server.stop()
  expect(await ended).toEqual([])
})
