import { afterAll, expect, test } from 'bun:test'
import { Value } from '@sinclair/typebox/value'
import { randomBase62 } from '../../src/lib/ids'
import type { Job as ServerJob } from '../../src/modules/workers/claim'
import type { UploadResponse } from '../../src/modules/workers/results'
import { type Job, type UploadResultsAnswer, WorkerAnswers } from '../../src/protocol/worker'
import { makeTestApp } from '../helpers/app'
import { startFakeControlPlane } from '../helpers/fake-control-plane'
import { rememberSecret } from '../helpers/secrets'
import { heartbeatBody, inventoryItem, makeFleet, registerBody } from '../helpers/workers'

// docs/api.md §7: one schema per protocol (src/protocol/worker.ts). The daemon's tests run against a
// fake control plane; it must refuse exactly what the server refuses, with the same 400, or a daemon
// body the server would reject could pass them.

const t = makeTestApp()
afterAll(() => t.close())

const post = async (base: string, key: string, path: string, body: unknown) => {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  return { status: res.status, body: (await res.json()) as any }
}

test('the fake control plane refuses the bodies the server refuses, with the same 400', async () => {
  const f = await makeFleet(t)
  const server = await t.req('POST', '/workers/register', { token: f.key, body: registerBody() })
  expect(server.status).toBe(200)
  const cpKey = `gk-${randomBase62(40)}`
  rememberSecret(cpKey)
  const cp = startFakeControlPlane({ key: cpKey })
  cp.expectRejections = true
  const fake = await post(cp.url, cpKey, '/workers/register', registerBody())
  expect(fake.status).toBe(200)

  const bad: [string, (id: string) => string, unknown][] = [
    ['unknown heartbeat field', (id) => `/workers/${id}/heartbeat`, heartbeatBody({ temperature: 70 })],
    ['bad activity', (id) => `/workers/${id}/heartbeat`, heartbeatBody({ activity: 'napping' })],
    [
      'inventory of an unknown engine',
      (id) => `/workers/${id}/heartbeat`,
      heartbeatBody({ inventory: [inventoryItem('m', { runtime: 'torch' })] }),
    ],
    ['register without runtimes', () => '/workers/register', { name: 'box' }],
    ['poll with an unknown field', () => '/workers/poll', { worker_id: 'wrk_x', limit: 2 }],
    ['report-failure without error', () => '/workers/report-failure', { job_id: 'b', worker_id: 'w' }],
  ]
  for (const [what, path, body] of bad) {
    const real = await t.req('POST', path(server.body.worker_id), { token: f.key, body })
    const faked = await post(cp.url, cpKey, path(fake.body.worker_id), body)
    expect({ what, status: real.status, code: real.body.error.code, param: real.body.error.param }).toEqual({
      what,
      status: 400,
      code: expect.any(String),
      param: expect.anything(),
    })
    expect({
      what,
      status: faked.status,
      code: faked.body.error.code,
      param: faked.body.error.param,
    }).toEqual({
      what,
      status: 400,
      code: real.body.error.code,
      param: real.body.error.param,
    })
  }
  expect(cp.rejected.length).toBe(bad.length)
  await cp.stop()
})

test('stop() fails a test whose daemon sent a body the server would refuse', async () => {
  const key = `gk-${randomBase62(40)}`
  rememberSecret(key)
  const cp = startFakeControlPlane({ key })
  const res = await post(cp.url, key, '/workers/register', registerBody({ colour: 'blue' }))
  expect(res.status).toBe(400)
  expect(res.body.error.code).toBe('unknown_field')
  await expect(cp.stop()).rejects.toThrow('colour')
})

test("the server's answers fit the protocol's answer schemas", async () => {
  const f = await makeFleet(t)
  const reg = await t.req('POST', '/workers/register', { token: f.key, body: registerBody() })
  expect([...Value.Errors(WorkerAnswers.register, reg.body)]).toEqual([])
  const id = reg.body.worker_id
  const hb = await t.req('POST', `/workers/${id}/heartbeat`, { token: f.key, body: heartbeatBody() })
  expect([...Value.Errors(WorkerAnswers.heartbeat, hb.body)]).toEqual([])
  const poll = await t.req('POST', '/workers/poll', { token: f.key, body: { worker_id: id } })
  expect([...Value.Errors(WorkerAnswers.poll, poll.body)]).toEqual([])
})

// Checked by the type check: what the server's handlers return is what the protocol says they answer
// (docs/api.md §7 poll, docs/api.md §16 shard fields; upload-results).
export const answersFit = (job: ServerJob, upload: UploadResponse): [Job, UploadResultsAnswer] => [
  job,
  upload,
]
