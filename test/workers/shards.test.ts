import { afterAll, describe, expect, test } from 'bun:test'
import { nextShardSize } from '../../src/domain/shards'
import type { Job } from '../../src/modules/workers/claim'
import { runOnce as sweep } from '../../src/services/sweeper'
import { makeTestApp, type TestApp } from '../helpers/app'
import { makeBatch, validateAll } from '../helpers/batches'
import { readBlob, strayBlobs } from '../helpers/blobs'
import { makeUser } from '../helpers/builders'
import {
  batchRow,
  errorLine,
  type Fleet,
  heartbeat,
  inputLine,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// docs/api.md §16: one batch, the whole fleet. Small bounds keep the batches small: shards of 10 to 100
// requests, so a batch of more than 20 requests is split.
const BOUNDS = { SHARD_MIN_REQUESTS: '10', SHARD_MAX_REQUESTS: '100' }

const apps: TestApp[] = []
const app = (env: Record<string, string> = {}) => {
  const t = makeTestApp({ ...BOUNDS, ...env })
  apps.push(t)
  return t
}
afterAll(async () => {
  for (const t of apps) await t.close()
})
// Most tests share one app: each makes its own fleet, model and batch.
let common: TestApp | undefined
const shared = () => {
  common ??= app()
  return common
}

let n = 0
interface Setup {
  t: TestApp
  f: Fleet
  batch: Awaited<ReturnType<typeof makeValidatedBatch>>
  workers: string[]
  ids: string[]
}

/** `workers` shard-capable workers hosting one model, and a validated, indexed batch of it. */
async function setup(
  t: TestApp,
  requests: number,
  workers = 1,
  o: { shards?: boolean } = {},
): Promise<Setup> {
  const f = await makeFleet(t)
  const runtimeId = `shard-model:${++n}`
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: runtimeId })
  const ids = Array.from({ length: requests }, (_, i) => `req-${i + 1}`)
  const batch = await makeValidatedBatch(t.deps, {
    userId: f.user.id,
    model: entry.id,
    customIds: ids,
    indexed: true,
  })
  const wids: string[] = []
  for (let i = 0; i < workers; i++) {
    const wid = await registerWorker(t, f.key, {
      name: `gpu-${i}`,
      models: [runtimeId],
      max_concurrent_jobs: 4,
      capabilities: { shards: o.shards ?? true },
    })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    wids.push(wid)
  }
  return { t, f, batch, workers: wids, ids }
}

/** The lines a shard job's input_path serves, read with the worker key. */
async function shardInput(s: Setup, job: Job, key = s.f.key) {
  const res = await s.t.req('GET', job.input_path, { token: key })
  return { status: res.status, lines: res.status === 200 ? (res.text ?? '').split('\n').filter(Boolean) : [] }
}

const customIds = (lines: string[]) => lines.map((l) => JSON.parse(l).custom_id as string)

const uploadShard = (s: Setup, wid: string, job: Job, lines: string[], fields: Record<string, string> = {}) =>
  upload(
    s.t,
    s.f.key,
    { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id, ...fields },
    lines.join('\n'),
  )

const report = (s: Setup, wid: string, job: Job, error = 'engine crashed') =>
  s.t.req('POST', '/workers/report-failure', {
    token: s.f.key,
    body: { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id, error },
  })

describe('docs/api.md §16 claims', () => {
  test('a batch of at most twice SHARD_MIN_REQUESTS is never split: a shard worker claims it whole', async () => {
    const s = await setup(shared(), 20)
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(job.job_id).toBe(s.batch.id)
    expect(job.shard).toBeUndefined()
    expect(job.total_requests).toBe(20)
    expect(
      (await s.t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body.shards,
    ).toBeNull()
  })

  test('SHARD_MAX_REQUESTS=0 turns sharding off: a large batch runs whole on a shard worker', async () => {
    const s = await setup(app({ SHARD_MAX_REQUESTS: '0' }), 400, 2)
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(job).toMatchObject({ job_id: s.batch.id, total_requests: 400 })
    expect(job.shard).toBeUndefined()
  })

  test('a worker that does not declare shards gets whole batches, and nothing of a split one', async () => {
    const t = shared()
    const s = await setup(t, 60, 1, { shards: false })
    const job = (await poll(t, s.f.key, s.workers[0]!))!
    expect(job.job_id).toBe(s.batch.id)
    expect(job.shard).toBeUndefined()
    expect(job.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content`)
    expect(job.total_requests).toBe(60)

    // A batch already split is not for it, though shards of it wait and it hosts the model.
    const split = await setup(t, 60, 2)
    const first = (await poll(t, split.f.key, split.workers[0]!))!
    expect(first.shard!.requests).toBeLessThan(60)
    const legacy = await registerWorker(t, split.f.key, { models: [first.model] })
    expect(await poll(t, split.f.key, legacy)).toBeNull()
    // It does take a whole batch of the same model.
    const whole = await makeValidatedBatch(t.deps, {
      userId: split.f.user.id,
      model: (await batchRow(t.deps, split.batch.id)).model!,
      requests: 5,
    })
    expect((await poll(t, split.f.key, legacy))!.job_id).toBe(whole.id)
  })

  test('guided self-scheduling: ceil(unclaimed ÷ eligible workers) within the bounds, contiguous, never twice', async () => {
    const s = await setup(shared(), 400, 4)
    const jobs: Job[] = []
    for (let i = 0; i < 12; i++) {
      const wid = s.workers[i % 4]!
      const job = await poll(s.t, s.f.key, wid)
      if (!job) break
      jobs.push(job)
    }
    let unclaimed = 400
    const expected: number[] = []
    while (unclaimed > 0) {
      const size = nextShardSize(unclaimed, 4, { min: 10, max: 100 })
      expected.push(size)
      unclaimed -= size
    }
    // Four workers × max_concurrent_jobs 4 = 16 slots: every shard is handed out.
    expect(jobs.map((j) => j.shard!.requests)).toEqual(expected)
    expect(expected.slice(0, 3)).toEqual([100, 75, 57])
    let next = 0
    for (const [i, job] of jobs.entries()) {
      expect(job.job_id).toMatch(/^shard_/)
      expect(job.batch_id).toBe(s.batch.id)
      expect(job.shard).toEqual({ index: i, first_request: next, requests: job.total_requests })
      next += job.total_requests
    }
    expect(next).toBe(400)
    // The batch is in progress, with every shard running, and nothing is left to cut: the next
    // poll gets only a backup copy of a shard another worker holds (docs/api.md §16).
    const batch = (await s.t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(batch.status).toBe('in_progress')
    expect(batch.shards).toEqual({ total: jobs.length, waiting: 0, running: jobs.length, done: 0 })
    const copy = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(copy.backup).toBe(true)
    expect(jobs.filter((_, i) => i % 4 !== 0).map((j) => j.job_id)).toContain(copy.job_id)
  })

  test('max_concurrent_jobs counts held shards', async () => {
    const t = shared()
    const s = await setup(t, 400, 1)
    const wid = await registerWorker(t, s.f.key, {
      models: [(await poll(t, s.f.key, s.workers[0]!))!.model],
      max_concurrent_jobs: 2,
      capabilities: { shards: true },
    })
    expect(await poll(t, s.f.key, wid)).not.toBeNull()
    expect(await poll(t, s.f.key, wid)).not.toBeNull()
    expect(await poll(t, s.f.key, wid)).toBeNull()
  })

  test('heartbeats list held shards in assigned_job_ids', async () => {
    const s = await setup(shared(), 60, 2)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const b = (await poll(s.t, s.f.key, s.workers[0]!))!
    const beat = await heartbeat(s.t, s.f.key, s.workers[0]!, { concurrency: 24 })
    expect(beat.body.assigned_job_ids.sort()).toEqual([a.job_id, b.job_id].sort())
    const rows = await s.t.req('GET', `/v1/orgs/${s.f.orgId}/workers`, { token: s.f.user.token })
    const row = rows.body.data.find((w: { id: string }) => w.id === s.workers[0])
    expect(row).toMatchObject({ concurrency: 24, capabilities: { shards: true } })
  })
})

describe('docs/api.md §16 request-line index', () => {
  test('validation writes it for a batch that may be split: each shard reads its own lines, blank lines and a BOM included', async () => {
    const t = shared()
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'indexed:1' })
    const ids = Array.from({ length: 45 }, (_, i) => `line-${i}`)
    // A BOM, CRLF endings and blank lines between requests: offsets are the validator's own.
    const content = `\uFEFF${ids.map((id, i) => inputLine(id, entry.id) + (i % 7 === 0 ? '\r\n  \n' : '\n')).join('')}`
    const created = await makeBatch(t, f.user, content)
    await validateAll(t)
    expect((await batchRow(t.deps, created.id)).status).toBe('validated')
    const wids = [0, 1].map(async (i) => {
      const wid = await registerWorker(t, f.key, {
        name: `w${i}`,
        models: ['indexed:1'],
        max_concurrent_jobs: 4,
        capabilities: { shards: true },
      })
      await heartbeat(t, f.key, wid)
      return wid
    })
    const [w0, w1] = await Promise.all(wids)
    const seen: string[] = []
    for (let i = 0; ; i++) {
      const job = await poll(t, f.key, i % 2 ? w1! : w0!)
      // Every request is in a shard once the polls bring only backup copies (docs/api.md §16).
      if (!job || job.backup) break
      const res = await t.req('GET', job.input_path, { token: f.key })
      const got = (res.text ?? '')
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l).custom_id)
      expect(got).toEqual(ids.slice(job.shard!.first_request, job.shard!.first_request + job.shard!.requests))
      seen.push(...got)
    }
    expect(seen).toEqual(ids)
  })

  test('a batch validated small is claimed whole', async () => {
    const t = shared()
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'small:1' })
    const created = await makeBatch(
      t,
      f.user,
      `${Array.from({ length: 20 }, (_, i) => inputLine(`s${i}`, entry.id)).join('\n')}\n`,
    )
    await validateAll(t)
    const wid = await registerWorker(t, f.key, { models: ['small:1'], capabilities: { shards: true } })
    expect((await poll(t, f.key, wid))!.job_id).toBe(created.id)
  })
})

describe('docs/api.md §16 input of a shard', () => {
  test('input_path serves exactly the shard’s lines; another org, or a shard not held, is a 404', async () => {
    const s = await setup(shared(), 60, 2)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const b = (await poll(s.t, s.f.key, s.workers[1]!))!
    expect(a.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content?shard=${a.job_id}`)
    for (const job of [a, b]) {
      const got = await shardInput(s, job)
      expect(got.status).toBe(200)
      const first = job.shard!.first_request
      expect(customIds(got.lines)).toEqual(s.ids.slice(first, first + job.shard!.requests))
      expect(got.lines[0]).toBe(inputLine(s.ids[first]!, (await batchRow(s.t.deps, s.batch.id)).model!))
    }
    const other = await makeFleet(s.t)
    expect((await shardInput(s, a, other.key)).status).toBe(404)
    // The owner may read it too; another user may not.
    expect((await s.t.req('GET', a.input_path, { token: s.f.user.token })).status).toBe(200)
    const stranger = await makeUser(s.t)
    expect((await s.t.req('GET', a.input_path, { token: stranger.token })).status).toBe(404)
    // A shard of another file, or no such shard.
    expect(
      (await s.t.req('GET', `/v1/files/file-x/content?shard=${a.job_id}`, { token: s.f.key })).status,
    ).toBe(404)
    expect(
      (
        await s.t.req('GET', `/v1/files/${s.batch.input_file_id}/content?shard=shard_nope`, {
          token: s.f.key,
        })
      ).status,
    ).toBe(404)
    // Once requeued, the shard is no longer the worker's to read.
    expect((await report(s, s.workers[0]!, a)).status).toBe(200)
    expect((await shardInput(s, a)).status).toBe(404)
  })
})

describe('docs/api.md §16 results', () => {
  test('shards uploaded in any order join into the files an unsplit run gives, summed; parts are removed', async () => {
    const t = shared()
    const s = await setup(t, 60, 3)
    const jobs: [string, Job][] = []
    for (const wid of s.workers) jobs.push([wid, (await poll(t, s.f.key, wid))!])
    for (
      let job = await poll(t, s.f.key, s.workers[0]!);
      job && !job.backup;
      job = await poll(t, s.f.key, s.workers[0]!)
    )
      jobs.push([s.workers[0]!, job])
    expect(jobs.length).toBeGreaterThan(2)
    // Every fifth request fails; the last request of each shard is left out (missing_result).
    const expectOk: string[] = []
    const expectErr: string[] = []
    const bodies = new Map<string, string[]>()
    for (const [, job] of jobs) {
      const ids = s.ids.slice(job.shard!.first_request, job.shard!.first_request + job.shard!.requests)
      const lines: string[] = []
      for (const [i, id] of ids.entries()) {
        if (i === ids.length - 1) expectErr.push(id)
        else if (Number(id.slice(4)) % 5 === 0) {
          lines.push(errorLine(id))
          expectErr.push(id)
        } else {
          lines.push(okLine(id))
          expectOk.push(id)
        }
      }
      bodies.set(job.job_id, lines)
    }
    // Uploaded last shard first: the join still follows shard order.
    const order = [...jobs].reverse()
    for (const [i, [wid, job]] of order.entries()) {
      const res = await uploadShard(s, wid, job, bodies.get(job.job_id)!)
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ batch_id: s.batch.id, job_id: job.job_id, status: 'completed' })
      expect(res.body.request_counts.total).toBe(job.shard!.requests)
      const batch = await batchRow(t.deps, s.batch.id)
      expect(batch.status).toBe(i === order.length - 1 ? 'completed' : 'in_progress')
    }
    const done = (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(done).toMatchObject({
      status: 'completed',
      request_counts: { total: 60, completed: expectOk.length, failed: expectErr.length },
      shards: { total: jobs.length, waiting: 0, running: 0, done: jobs.length },
    })
    const output = (await readBlob(t.deps, done.output_file_id))!.split('\n').filter(Boolean)
    const errors = (await readBlob(t.deps, done.error_file_id))!.split('\n').filter(Boolean)
    // The output holds the successes in input order, exactly as the worker sent them.
    expect(output).toEqual(expectOk.map((id) => okLine(id)))
    expect(customIds(errors).sort()).toEqual(expectErr.sort())
    expect(errors.filter((l) => JSON.parse(l).error?.code === 'missing_result')).toHaveLength(jobs.length)
    // usage summed over the shards: 12 tokens per success.
    const res = await t.req('GET', '/v1/usage?group_by=model', { token: s.f.user.token })
    expect(res.body.data[0]).toMatchObject({ requests: expectOk.length, total_tokens: 12 * expectOk.length })
    // The shards' parts are gone once joined: only the batch's files remain.
    expect(await strayBlobs(t.deps)).toEqual([])
    // A repeat of a shard upload is the same 200.
    const [wid, job] = jobs[0]!
    expect((await uploadShard(s, wid, job, bodies.get(job.job_id)!)).status).toBe(200)
  })

  test('an org’s usage counts the shards its own workers ran (docs/api.md §14, §16)', async () => {
    const t = shared()
    const s = await setup(t, 60, 2)
    // A second org's worker hosting the same model takes the other shards.
    const other = await makeFleet(t)
    const runtimeId = (await poll(t, s.f.key, s.workers[0]!))!.model
    const theirs = await registerWorker(t, other.key, {
      models: [runtimeId],
      max_concurrent_jobs: 4,
      capabilities: { shards: true },
    })
    expect((await heartbeat(t, other.key, theirs)).status).toBe(200)
    const [mine] = (await t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })).body
      .data
    const ran = new Map<string, number>([
      [s.f.orgId, 0],
      [other.orgId, 0],
    ])
    const finish = async (
      fleet: Fleet,
      wid: string,
      job: { id: string; assignment: string; first: number; n: number },
    ) => {
      const ids = s.ids.slice(job.first, job.first + job.n)
      const res = await upload(
        t,
        fleet.key,
        { job_id: job.id, worker_id: wid, assignment_id: job.assignment },
        ids.map((id) => okLine(id)).join('\n'),
      )
      expect(res.status).toBe(200)
      ran.set(fleet.orgId, ran.get(fleet.orgId)! + job.n)
    }
    const found = await t.deps.store.queue.shardWithBatch(mine.id)
    await finish(s.f, s.workers[0]!, {
      id: mine.id,
      assignment: found!.shard.assignment_id!,
      first: mine.first_request,
      n: mine.requests,
    })
    for (let job = await poll(t, other.key, theirs); job; job = await poll(t, other.key, theirs)) {
      await finish(other, theirs, {
        id: job.job_id,
        assignment: job.assignment_id,
        first: job.shard!.first_request,
        n: job.total_requests,
      })
    }
    expect((await batchRow(t.deps, s.batch.id)).status).toBe('completed')
    expect(ran.get(other.orgId)).toBeGreaterThan(0)
    for (const [fleet, count] of [
      [s.f, ran.get(s.f.orgId)!],
      [other, ran.get(other.orgId)!],
    ] as const) {
      const usage = await t.req('GET', `/v1/orgs/${fleet.orgId}/usage?group_by=model`, {
        token: fleet.user.token,
      })
      expect(usage.status).toBe(200)
      expect(usage.body.data).toHaveLength(1)
      expect(usage.body.data[0]).toMatchObject({ batches: 1, requests: count, total_tokens: 12 * count })
    }
  })

  test('a shard upload carrying another shard’s custom_id is a 400 invalid_output and changes nothing', async () => {
    const s = await setup(shared(), 60, 2)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const b = (await poll(s.t, s.f.key, s.workers[1]!))!
    const theirs = s.ids[b.shard!.first_request]!
    const res = await uploadShard(s, s.workers[0]!, a, [okLine(s.ids[0]!), okLine(theirs)])
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('invalid_output')
    const shards = (await s.t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })).body
    expect(shards.data.map((x: { status: string }) => x.status)).toEqual(['running', 'running'])
    expect((await batchRow(s.t.deps, s.batch.id)).request_counts_completed).toBe(0)
    expect(await strayBlobs(s.t.deps)).toEqual([])
  })

  test('progress of each shard adds up in the batch’s live counts; a count past the shard’s total is a 400', async () => {
    const s = await setup(shared(), 60, 2)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const b = (await poll(s.t, s.f.key, s.workers[1]!))!
    const progress = (wid: string, job: Job, completed: number, failed: number) =>
      s.t.req('POST', '/workers/progress', {
        token: s.f.key,
        body: {
          worker_id: wid,
          job_id: job.job_id,
          assignment_id: job.assignment_id,
          total_prompts: job.total_requests,
          completed_prompts: completed,
          failed_prompts: failed,
        },
      })
    expect((await progress(s.workers[0]!, a, 5, 1)).status).toBe(200)
    expect((await progress(s.workers[1]!, b, 7, 0)).status).toBe(200)
    expect((await progress(s.workers[0]!, a, 9, 1)).status).toBe(200)
    expect(await batchRow(s.t.deps, s.batch.id)).toMatchObject({
      request_counts_completed: 16,
      request_counts_failed: 1,
    })
    expect((await progress(s.workers[0]!, a, a.total_requests + 1, 0)).status).toBe(400)
    // Another worker's shard is a 403.
    expect((await progress(s.workers[1]!, a, 9, 1)).status).toBe(403)
  })
})

describe('docs/api.md §16 failures', () => {
  test('a failed shard waits again and is offered before any new shard; the batch keeps running', async () => {
    const s = await setup(shared(), 400, 2)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const b = (await poll(s.t, s.f.key, s.workers[1]!))!
    const res = await report(s, s.workers[0]!, a)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      status: 'validated',
      batch_id: s.batch.id,
      attempts: 1,
      error: 'engine crashed',
    })
    expect(await batchRow(s.t.deps, s.batch.id)).toMatchObject({ status: 'in_progress', attempts: 1 })
    const again = (await poll(s.t, s.f.key, s.workers[1]!))!
    expect(again.job_id).toBe(a.job_id)
    expect(again.shard).toEqual(a.shard)
    expect(again.assignment_id).not.toBe(a.assignment_id)
    // The old run is fenced off.
    expect((await uploadShard(s, s.workers[0]!, a, [okLine(s.ids[0]!)])).status).toBe(403)
    const listed = (await s.t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })).body
      .data
    expect(listed[0]).toMatchObject({
      index: 0,
      status: 'running',
      attempts: 1,
      worker_id: s.workers[1],
      worker_name: 'gpu-1',
    })
    expect(listed[1]).toMatchObject({ index: 1, status: 'running', attempts: 0, worker_id: s.workers[1] })
    expect(b.shard!.index).toBe(1)
  })

  test('every shard requeued: the batch is validated again, then claimed again shard by shard', async () => {
    const s = await setup(shared(), 60, 1)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect((await report(s, s.workers[0]!, a)).status).toBe(200)
    expect((await batchRow(s.t.deps, s.batch.id)).status).toBe('validated')
    const again = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(again.job_id).toBe(a.job_id)
    expect((await batchRow(s.t.deps, s.batch.id)).status).toBe('in_progress')
  })

  test('a shard that exhausts its attempts fails the batch; the other shards’ writes get 409', async () => {
    const s = await setup(shared(), 60, 3)
    let a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const b = (await poll(s.t, s.f.key, s.workers[1]!))!
    // A third shard is done first: its parts wait for the join that will never come.
    const c = (await poll(s.t, s.f.key, s.workers[2]!))!
    const cIds = s.ids.slice(c.shard!.first_request, c.shard!.first_request + c.shard!.requests)
    expect(
      (
        await uploadShard(
          s,
          s.workers[2]!,
          c,
          cIds.map((id) => okLine(id)),
        )
      ).status,
    ).toBe(200)
    expect((await strayBlobs(s.t.deps)).length).toBe(1)
    for (let attempt = 1; attempt <= 3; attempt++) {
      const res = await report(s, s.workers[0]!, a, `crash ${attempt}`)
      expect(res.body.status).toBe(attempt < 3 ? 'validated' : 'failed')
      expect(res.body.attempts).toBe(attempt)
      if (attempt < 3) a = (await poll(s.t, s.f.key, s.workers[0]!))!
    }
    expect(await batchRow(s.t.deps, s.batch.id)).toMatchObject({
      status: 'failed',
      attempts: 3,
      error: 'crash 3',
      request_counts_completed: 0,
      request_counts_failed: 60,
    })
    const ids = s.ids.slice(b.shard!.first_request, b.shard!.first_request + b.shard!.requests)
    const up = await uploadShard(
      s,
      s.workers[1]!,
      b,
      ids.map((id) => okLine(id)),
    )
    expect(up.status).toBe(409)
    expect(up.body.error.code).toBe('batch_not_in_progress')
    const progress = await s.t.req('POST', '/workers/progress', {
      token: s.f.key,
      body: {
        worker_id: s.workers[1],
        job_id: b.job_id,
        assignment_id: b.assignment_id,
        completed_prompts: 1,
        failed_prompts: 0,
      },
    })
    expect(progress.status).toBe(409)
    expect((await report(s, s.workers[1]!, b)).status).toBe(409)
    // The failed batch's running shard holds nothing any more: not assigned, no slot taken.
    expect((await heartbeat(s.t, s.f.key, s.workers[1]!)).body.assigned_job_ids).toEqual([])
    expect(await poll(s.t, s.f.key, s.workers[0]!)).toBeNull()
    expect(await strayBlobs(s.t.deps)).toEqual([])
  })

  test('the sweeper requeues only the silent holder’s shard', async () => {
    const t = app() // its own: it moves the clock and sweeps
    const s = await setup(t, 60, 2)
    const a = (await poll(t, s.f.key, s.workers[0]!))!
    const b = (await poll(t, s.f.key, s.workers[1]!))!
    t.clock.advance(t.deps.config.HEARTBEAT_TIMEOUT_SECONDS - 10)
    expect((await heartbeat(t, s.f.key, s.workers[1]!)).status).toBe(200)
    t.clock.advance(20)
    t.deps.startedAt = 0
    const result = await sweep(t.deps)
    expect(result.workers_offline).toEqual([s.workers[0]])
    const shards = (await t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })).body
      .data
    expect(shards.map((x: { id: string; status: string }) => [x.id, x.status])).toEqual([
      [a.job_id, 'waiting'],
      [b.job_id, 'running'],
    ])
    expect(await batchRow(t.deps, s.batch.id)).toMatchObject({
      status: 'in_progress',
      attempts: 1,
      error: `worker ${s.workers[0]} went silent`,
    })
  })

  test('re-registration requeues the worker’s shards', async () => {
    const s = await setup(shared(), 60, 1)
    const a = (await poll(s.t, s.f.key, s.workers[0]!))!
    const res = await s.t.req('POST', '/workers/register', {
      token: s.f.key,
      body: { name: 'gpu-0', worker_id: s.workers[0], runtimes: [], capabilities: { shards: true } },
    })
    expect(res.status).toBe(200)
    const listed = (await s.t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })).body
      .data
    expect(listed[0]).toMatchObject({ id: a.job_id, status: 'waiting', attempts: 1 })
  })
})

describe('docs/api.md §16 reads', () => {
  test('GET /v1/batches/{id}/shards: the owner and a superadmin see them; anyone else gets a 404', async () => {
    const s = await setup(shared(), 60, 1)
    await poll(s.t, s.f.key, s.workers[0]!)
    const stranger = await makeUser(s.t)
    expect((await s.t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: stranger.token })).status).toBe(
      404,
    )
    const own = await s.t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })
    expect(own.status).toBe(200)
    expect(own.body.data[0]).toEqual({
      id: expect.stringMatching(/^shard_/),
      object: 'batch.shard',
      index: 0,
      first_request: 0,
      requests: expect.any(Number),
      status: 'running',
      attempts: 0,
      worker_id: s.workers[0],
      worker_name: 'gpu-0',
      assigned_at: s.t.clock.now(),
      backup_worker_id: null,
      backup_worker_name: null,
      backup_assigned_at: null,
      backup_won: false,
      completed_at: null,
      request_counts: { total: own.body.data[0].requests, completed: 0, failed: 0 },
    })
    // Pages in shard order (docs/api.md §0 cursors).
    const s2 = await setup(shared(), 400, 4)
    for (let i = 0; i < 6; i++) await poll(s2.t, s2.f.key, s2.workers[i % 4]!)
    const page = async (q: string) =>
      (await s2.t.req('GET', `/v1/batches/${s2.batch.id}/shards${q}`, { token: s2.f.user.token })).body
    const first = await page('?limit=4')
    expect(first.data.map((x: { index: number }) => x.index)).toEqual([0, 1, 2, 3])
    expect(first).toMatchObject({ has_more: true, first_id: first.data[0].id, last_id: first.data[3].id })
    const second = await page(`?limit=4&after=${first.last_id}`)
    expect(second.data.map((x: { index: number }) => x.index)).toEqual([4, 5])
    expect(second.has_more).toBe(false)
    expect(
      (await s2.t.req('GET', `/v1/batches/${s2.batch.id}/shards?after=shard_x`, { token: s2.f.user.token }))
        .status,
    ).toBe(400)
    expect(
      (await s2.t.req('GET', `/v1/batches/${s2.batch.id}/shards?limit=0`, { token: s2.f.user.token })).status,
    ).toBe(400)
    // The listing shows the tally too.
    const list = (await s.t.req('GET', '/v1/batches', { token: s.f.user.token })).body.data
    expect(list.find((b: { id: string }) => b.id === s.batch.id).shards).toMatchObject({ running: 1 })
  })

  test('gridkeep_shards reports shards by state', async () => {
    const s = await setup(app(), 60, 1)
    await poll(s.t, s.f.key, s.workers[0]!)
    const text = (await s.t.req('GET', '/metrics')).text ?? ''
    expect(text).toContain('gridkeep_shards{state="running"} 1')
    expect(text).toContain('gridkeep_shards{state="waiting"} 0')
  })
})

describe('docs/api.md §7 heartbeat interval', () => {
  test('a short HEARTBEAT_TIMEOUT_SECONDS makes daemons beat every quarter of it', async () => {
    const t = app({ HEARTBEAT_TIMEOUT_SECONDS: '6' })
    const f = await makeFleet(t)
    const res = await t.req('POST', '/workers/register', { token: f.key, body: { name: 'w', runtimes: [] } })
    expect(res.body).toMatchObject({ heartbeat_interval_seconds: 1, heartbeat_timeout_seconds: 6 })
    expect((await heartbeat(t, f.key, res.body.worker_id)).body.next_heartbeat_in).toBe(1)
    const slow = app({ HEARTBEAT_TIMEOUT_SECONDS: '600' })
    const g = await makeFleet(slow)
    const again = await slow.req('POST', '/workers/register', {
      token: g.key,
      body: { name: 'w', runtimes: [] },
    })
    expect(again.body.heartbeat_interval_seconds).toBe(30)
  })
})
