import { describe, expect, test } from 'bun:test'
import { ApiError, TransportError } from '../../src/daemon/client'
import { classifyFailure, type FailureAction } from '../../src/daemon/failure'

// The daemon's one rule for a failed control-plane call (docs/api.md §7, docs/api.md §0 codes):
// src/daemon/failure.ts.

const api = (status: number, code: string | null = null) => new ApiError(status, code, `→ ${status}`)
const retry: FailureAction = { do: 'retry' }
const keyRefused: FailureAction = { do: 'fatal', message: 'the server rejected the worker key' }

describe('classifyFailure', () => {
  test('the network, 429 and 5xx are retried on every call', () => {
    for (const call of ['register', 'heartbeat', 'poll', 'job'] as const)
      for (const e of [new TransportError('refused'), api(429), api(500), api(503), new Error('snapshot')])
        expect(classifyFailure(call, e, { reusedWorkerId: true, waitSeconds: 20 })).toEqual(retry)
  })

  test('register: a refused key or body is fatal; a refused stored worker_id is dropped', () => {
    expect(classifyFailure('register', api(401))).toEqual(keyRefused)
    expect(classifyFailure('register', api(400))).toEqual({
      do: 'fatal',
      message: 'registration refused: → 400',
    })
    expect(classifyFailure('register', api(403))).toEqual({
      do: 'fatal',
      message: 'registration refused: → 403',
    })
    for (const status of [403, 404])
      expect(classifyFailure('register', api(status), { reusedWorkerId: true })).toEqual({
        do: 'reregister',
        forgetWorkerId: true,
      })
  })

  test('heartbeat and poll: 401 is fatal; 404 registers again; 403 forgets the id first', () => {
    for (const call of ['heartbeat', 'poll'] as const) {
      expect(classifyFailure(call, api(401))).toEqual(keyRefused)
      expect(classifyFailure(call, api(404))).toEqual({ do: 'reregister', forgetWorkerId: false })
      expect(classifyFailure(call, api(403))).toEqual({ do: 'reregister', forgetWorkerId: true })
      expect(classifyFailure(call, api(409))).toEqual(retry)
    }
  })

  test('poll: a 400 to a held poll means an older server; a 400 to a plain one is retried', () => {
    expect(classifyFailure('poll', api(400), { waitSeconds: 20 })).toEqual({ do: 'poll_plainly' })
    expect(classifyFailure('poll', api(400), { waitSeconds: 0 })).toEqual(retry)
    expect(classifyFailure('heartbeat', api(400))).toEqual(retry)
  })

  test("a job's call: 403, batch_not_in_progress or shard_done_elsewhere (docs/api.md §16) stops the job", () => {
    expect(classifyFailure('job', api(403))).toEqual({ do: 'stop_job', reason: 'not_holder' })
    expect(classifyFailure('job', api(409, 'batch_not_in_progress'))).toEqual({
      do: 'stop_job',
      reason: 'batch_not_in_progress',
    })
    expect(classifyFailure('job', api(409, 'shard_done_elsewhere'))).toEqual({
      do: 'stop_job',
      reason: 'shard_done_elsewhere',
    })
    // docs/api.md §3: the worker was removed (its batches went back to the queue).
    expect(classifyFailure('job', api(404, 'worker_not_found'))).toEqual({
      do: 'stop_job',
      reason: 'worker_unknown',
    })
    expect(classifyFailure('job', api(404, 'file_not_found'))).toEqual(retry)
    expect(classifyFailure('job', api(409, 'other'))).toEqual(retry)
    expect(classifyFailure('job', api(401))).toEqual(retry)
  })
})
