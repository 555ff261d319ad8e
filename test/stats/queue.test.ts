import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { batches } from '../../src/db/schema'
import { newId } from '../../src/lib/ids'
import { CACHE_SECONDS, STEP_SECONDS, WINDOW_SECONDS } from '../../src/modules/stats/service'
import { makeTestApp } from '../helpers/app'
import { type MadeUser, makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

// GET /v1/stats/queue: the dashboard's chart of queue depth and throughput over the last hour,
// rebuilt from the batches' timestamps.

const t = makeTestApp()
afterAll(() => t.close())
let user: MadeUser

beforeAll(async () => {
  user = await makeUser(t)
})

type Status = (typeof batches.$inferInsert)['status']
async function insertBatch(o: {
  status: Status
  created: number
  inProgress?: number
  completed?: number
  failed?: number
  done?: number
}) {
  const { db, tables } = rowsOf(t.deps)
  await db.insert(tables.batches).values({
    id: newId('batch_'),
    user_id: user.id,
    input_file_id: newId('file-'),
    endpoint: '/v1/chat/completions',
    completion_window: '24h',
    status: o.status,
    created_at: o.created,
    in_progress_at: o.inProgress ?? null,
    completed_at: o.completed ?? null,
    failed_at: o.failed ?? null,
    request_counts_total: o.done ?? 0,
    request_counts_completed: o.done ?? 0,
    updated_at: o.created,
  })
}

const stats = async (token = user.token) => t.req('GET', '/v1/stats/queue', { token })

describe('GET /v1/stats/queue', () => {
  test('a JWT or a personal key; nothing else', async () => {
    expect((await t.req('GET', '/v1/stats/queue')).status).toBe(401)
    expect((await stats((await makeWorkerKey(t, user, user.personalOrgId)).key)).status).toBe(401)
    expect((await stats((await makePersonalKey(t, user)).key)).status).toBe(200)
  })

  test('one point a minute over the hour: waiting batches, and requests completed per minute', async () => {
    t.clock.advance(CACHE_SECONDS) // past any figures cached by the test above
    const now = t.clock.now()
    const ago = (minutes: number) => now - minutes * 60
    // Waiting since 30 min ago.
    await insertBatch({ status: 'validated', created: ago(30) + 1 })
    // Waited from 50 to 40 min ago, then ran; 7 requests done 10 min ago.
    await insertBatch({
      status: 'completed',
      created: ago(50) + 1,
      inProgress: ago(40) + 1,
      completed: ago(10) - 1,
      done: 7,
    })
    // Running since 5 min ago after waiting 1 min.
    await insertBatch({ status: 'in_progress', created: ago(6) + 1, inProgress: ago(5) + 1 })
    // Failed by validation 20 min ago: waited while validating, never counts as throughput.
    await insertBatch({ status: 'failed', created: ago(21) + 1, failed: ago(20) + 1, completed: ago(20) + 1 })
    // Finished long before the window: not in it at all.
    await insertBatch({
      status: 'completed',
      created: ago(300),
      inProgress: ago(290),
      completed: ago(200),
      done: 99,
    })
    await insertBatch({ status: 'validating', created: now })

    const res = await stats()
    expect(res.status).toBe(200)
    const body = res.body
    expect(body).toMatchObject({ object: 'queue.stats', as_of: now, step_seconds: STEP_SECONDS })
    expect([body.validating, body.validated, body.in_progress]).toEqual([1, 1, 1])
    const points = body.points as { t: number; queued: number; requests_completed: number }[]
    expect(points).toHaveLength(WINDOW_SECONDS / STEP_SECONDS)
    expect(points.at(-1)!.t).toBe(now)
    expect(points[0]!.t).toBe(now - WINDOW_SECONDS + STEP_SECONDS)
    // The point at the end of minute m ago: which batches were waiting then.
    const at = (minutesAgo: number) => points.find((p) => p.t === ago(minutesAgo))!
    expect(at(55).queued).toBe(0)
    expect(at(45).queued).toBe(1) // the completed one, before its claim
    expect(at(35).queued).toBe(0)
    expect(at(25).queued).toBe(1) // the validated one
    expect(at(21).queued).toBe(1)
    expect(at(20).queued).toBe(2) // plus the one failing validation, until it failed
    expect(at(6).queued).toBe(1)
    expect(at(5).queued).toBe(2) // plus the running one, until its claim
    expect(at(0).queued).toBe(2) // the validated one and the new validating one
    expect(points.reduce((n, p) => n + p.requests_completed, 0)).toBe(7)
    expect(at(10).requests_completed).toBe(7)
  })

  test('recomputed at most every CACHE_SECONDS', async () => {
    t.clock.advance(CACHE_SECONDS)
    const first = (await stats()).body
    await insertBatch({ status: 'validated', created: t.clock.now() })
    expect((await stats()).body).toEqual(first)
    t.clock.advance(CACHE_SECONDS)
    const fresh = (await stats()).body
    expect(fresh.validated).toBe(first.validated + 1)
    expect(fresh.as_of).toBe(first.as_of + CACHE_SECONDS)
  })

  test('is documented in the OpenAPI document', async () => {
    const doc = (await t.req('GET', '/openapi.json')).body
    const op = doc.paths['/v1/stats/queue'].get
    expect(op['x-gridkeep-auth']).toBe('user')
    expect(op.summary).toContain('Queue depth')
    expect(Object.keys(op.responses['200'].content['application/json'].schema.properties)).toContain('points')
  })
})
