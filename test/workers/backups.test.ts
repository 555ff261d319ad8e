import { afterAll, describe, expect, test } from 'bun:test'
import type { Job } from '../../src/modules/workers/claim'
import { runOnce as sweep } from '../../src/services/sweeper'
import { makeTestApp, type TestApp } from '../helpers/app'
import { readBlob, strayBlobs } from '../helpers/blobs'
import { makeUser } from '../helpers/builders'
import {
  batchRow,
  type Fleet,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// docs/api.md §16 backup copies: when a split batch has nothing left to hand out, an otherwise idle
// worker runs a copy of its oldest running shard; the first complete upload wins, and fencing keeps
// the other copy's writes out. Small bounds: shards of 10 to 100 requests, so a batch of 60 between
// two eligible workers is cut into shards of 30, 15, 10 and 5.

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
let common: TestApp | undefined
const shared = () => {
  common ??= app()
  return common
}

let n = 0
interface Setup {
  t: TestApp
  /** The batch owner's org: its worker `holder` takes the shards. */
  f: Fleet
  /** Another org: its worker `spare` runs backup copies. */
  other: Fleet
  batch: Awaited<ReturnType<typeof makeValidatedBatch>>
  ids: string[]
  runtimeId: string
  holder: string
  spare: string
}

async function setup(t: TestApp, requests = 60, o: { spareLimit?: number } = {}): Promise<Setup> {
  const f = await makeFleet(t)
  const other = await makeFleet(t)
  const runtimeId = `backup-model:${++n}`
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: runtimeId })
  const ids = Array.from({ length: requests }, (_, i) => `req-${i + 1}`)
  const batch = await makeValidatedBatch(t.deps, {
    userId: f.user.id,
    model: entry.id,
    customIds: ids,
    indexed: true,
  })
  const worker = async (fleet: Fleet, name: string, limit: number) => {
    const wid = await registerWorker(t, fleet.key, {
      name,
      models: [runtimeId],
      max_concurrent_jobs: limit,
      capabilities: { shards: true },
    })
    expect((await heartbeat(t, fleet.key, wid)).status).toBe(200)
    return wid
  }
  const holder = await worker(f, `holder-${n}`, 8)
  const spare = await worker(other, `spare-${n}`, o.spareLimit ?? 8)
  return { t, f, other, batch, ids, runtimeId, holder, spare }
}

/** The holder takes every shard of the batch (its polls cut it whole). */
async function holderTakesAll(s: Setup): Promise<Job[]> {
  const jobs: Job[] = []
  for (let i = 0; i < 4; i++) jobs.push((await poll(s.t, s.f.key, s.holder))!)
  expect(jobs.map((j) => j.shard!.requests)).toEqual([30, 15, 10, 5])
  expect(jobs.every((j) => j.backup === undefined)).toBe(true)
  return jobs
}

const linesOf = (s: Setup, job: Job, line: (id: string) => string = (id) => okLine(id)) =>
  s.ids
    .slice(job.shard!.first_request, job.shard!.first_request + job.shard!.requests)
    .map(line)
    .join('\n')

const send = (s: Setup, key: string, wid: string, job: Job, line?: (id: string) => string) =>
  upload(
    s.t,
    key,
    { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id },
    linesOf(s, job, line),
  )

const progress = (s: Setup, key: string, wid: string, job: Job, completed: number, failed = 0) =>
  s.t.req('POST', '/workers/progress', {
    token: key,
    body: {
      worker_id: wid,
      job_id: job.job_id,
      assignment_id: job.assignment_id,
      completed_prompts: completed,
      failed_prompts: failed,
    },
  })

const report = (s: Setup, key: string, wid: string, job: Job, error = 'engine crashed') =>
  s.t.req('POST', '/workers/report-failure', {
    token: key,
    body: { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id, error },
  })

const shardsOf = async (s: Setup) =>
  (await s.t.req('GET', `/v1/batches/${s.batch.id}/shards`, { token: s.f.user.token })).body.data as {
    id: string
    status: string
    attempts: number
    worker_id: string | null
    backup_worker_id: string | null
    backup_worker_name: string | null
    backup_won: boolean
    request_counts: { completed: number; failed: number }
  }[]

const codeOf = (res: { status: number; body: any }) => [res.status, res.body?.error?.code ?? null]

const metric = async (t: TestApp, outcome: string) => {
  const text = (await t.req('GET', '/metrics')).text ?? ''
  const m = new RegExp(`gridkeep_shard_backups_total\\{outcome="${outcome}"\\} (\\d+)`).exec(text)
  return m ? Number(m[1]) : 0
}

describe('docs/api.md §16 backup copies: when one is handed out', () => {
  test('only once nothing is waiting or left to cut; never to the holder itself; at most one per shard', async () => {
    const s = await setup(shared())
    const a = (await poll(s.t, s.f.key, s.holder))!
    // Requests are left to cut: the spare worker gets the next shard, not a copy of the running one.
    const b = (await poll(s.t, s.other.key, s.spare))!
    expect(b.backup).toBeUndefined()
    expect(b.shard!.index).toBe(1)
    const c = (await poll(s.t, s.f.key, s.holder))!
    const d = (await poll(s.t, s.f.key, s.holder))!
    expect([c.shard!.index, d.shard!.index]).toEqual([2, 3])
    // Everything is cut and held: the holder's next poll backs up the one shard it does not hold.
    const copyOfB = (await poll(s.t, s.f.key, s.holder))!
    expect(copyOfB).toMatchObject({
      job_id: b.job_id,
      backup: true,
      shard: b.shard,
      input_path: b.input_path,
    })
    expect(copyOfB.assignment_id).not.toBe(b.assignment_id)
    // Every other running shard is its own, and B has its backup: nothing more for it.
    expect(await poll(s.t, s.f.key, s.holder)).toBeNull()
    // The spare worker backs up the oldest running shard it does not hold.
    expect(await poll(s.t, s.other.key, s.spare)).toMatchObject({ job_id: a.job_id, backup: true })
    // A worker that does not declare shards never gets a copy.
    const legacy = await registerWorker(s.t, s.f.key, { models: [s.runtimeId], max_concurrent_jobs: 4 })
    expect(await poll(s.t, s.f.key, legacy)).toBeNull()
    // A shard waiting again (requeued: it had no backup) is handed out as itself before any copy.
    expect((await report(s, s.f.key, s.holder, d)).body.status).toBe('validated')
    const third = await registerWorker(s.t, s.f.key, {
      models: [s.runtimeId],
      max_concurrent_jobs: 4,
      capabilities: { shards: true },
    })
    const retaken = (await poll(s.t, s.f.key, third))!
    expect(retaken).toMatchObject({ job_id: d.job_id })
    expect(retaken.backup).toBeUndefined()
    // Then C, the one running shard left without a backup.
    expect(await poll(s.t, s.f.key, third)).toMatchObject({ job_id: c.job_id, backup: true })
    expect(await poll(s.t, s.f.key, third)).toBeNull()
    const listed = await shardsOf(s)
    expect(listed.map((x) => [x.worker_id, x.backup_worker_id])).toEqual([
      [s.holder, s.spare],
      [s.spare, s.holder],
      [s.holder, third],
      [third, null],
    ])
    expect(listed[0]!.backup_worker_name).toBe(`spare-${n}`)
  })

  test('SHARD_BACKUPS=false: never; the idle worker that would have run a copy gets nothing', async () => {
    const s = await setup(app({ SHARD_BACKUPS: 'false' }))
    await holderTakesAll(s)
    // With backups on this poll would back up the holder's oldest shard (the test above).
    expect(await poll(s.t, s.other.key, s.spare)).toBeNull()
    expect((await shardsOf(s)).every((x) => x.backup_worker_id === null)).toBe(true)
  })

  test('not while a failed copy could use up the shard’s attempts (attempts + 1 below MAX_BATCH_ATTEMPTS)', async () => {
    const s = await setup(shared(), 30)
    // 30 requests between two workers: shards of 15, 10 and 5.
    let a = (await poll(s.t, s.f.key, s.holder))!
    for (let attempt = 1; attempt <= 2; attempt++) {
      expect((await report(s, s.f.key, s.holder, a)).body.attempts).toBe(attempt)
      a = (await poll(s.t, s.f.key, s.holder))!
      expect(a.shard!.index).toBe(0)
    }
    await poll(s.t, s.f.key, s.holder)
    const last = (await poll(s.t, s.f.key, s.holder))!
    expect(last.shard!.index).toBe(2)
    // Shard 0 is on its last attempt: the spare worker backs up the next oldest, never it.
    const copy = (await poll(s.t, s.other.key, s.spare))!
    expect(copy).toMatchObject({ backup: true, shard: { index: 1 } })
    expect((await poll(s.t, s.other.key, s.spare))!.shard!.index).toBe(2)
    expect(await poll(s.t, s.other.key, s.spare)).toBeNull()
  })

  test('a backup counts toward max_concurrent_jobs and is in the heartbeat’s assigned_job_ids', async () => {
    const s = await setup(shared(), 60, { spareLimit: 1 })
    const [a] = await holderTakesAll(s)
    const copy = (await poll(s.t, s.other.key, s.spare))!
    expect(copy).toMatchObject({ job_id: a!.job_id, backup: true })
    expect((await heartbeat(s.t, s.other.key, s.spare)).body.assigned_job_ids).toEqual([a!.job_id])
    // A whole batch the spare worker could serve waits: its one slot holds the backup.
    const whole = await makeValidatedBatch(s.t.deps, {
      userId: s.other.user.id,
      model: (await batchRow(s.t.deps, s.batch.id)).model!,
      requests: 5,
    })
    expect(await poll(s.t, s.other.key, s.spare)).toBeNull()
    expect((await batchRow(s.t.deps, whole.id)).status).toBe('validated')
    // The input of its copy is readable with its own org's key.
    const input = await s.t.req('GET', copy.input_path, { token: s.other.key })
    expect(input.status).toBe(200)
    expect((input.text ?? '').split('\n').filter(Boolean)).toHaveLength(30)
  })

  test('fair share (docs/api.md §14) counts a backup like a held shard', async () => {
    const t = app() // its own: fair share looks at every owner's work in progress
    const s = await setup(t)
    await holderTakesAll(s)
    // Another owner runs four whole batches: four in progress each.
    const q = await makeUser(t)
    const small = await makeCatalogEntry(t.deps, { runtime_model_id: 'fair-small:1' })
    const busy = await registerWorker(t, s.f.key, { models: ['fair-small:1'], max_concurrent_jobs: 8 })
    for (let i = 0; i < 4; i++) {
      await makeValidatedBatch(t.deps, { userId: q.id, model: small.id, requests: 5 })
      expect(await poll(t, s.f.key, busy)).not.toBeNull()
    }
    // The backup makes it five for the batch's owner.
    expect(await poll(t, s.other.key, s.spare)).toMatchObject({ backup: true })
    const older = await makeValidatedBatch(t.deps, { userId: s.f.user.id, model: small.id, requests: 5 })
    const newer = await makeValidatedBatch(t.deps, { userId: q.id, model: small.id, requests: 5 })
    expect(older.seq).toBeLessThan(newer.seq)
    const fresh = await registerWorker(t, s.f.key, { models: ['fair-small:1'], max_concurrent_jobs: 8 })
    expect((await poll(t, s.f.key, fresh))!.job_id).toBe(newer.id)
  })
})

describe('docs/api.md §16 backup copies: the first complete upload wins', () => {
  test('the backup wins: its output is the shard’s, nothing counts twice, the holder’s writes get 409', async () => {
    const t = app() // its own: usage and metrics are read whole
    const s = await setup(t)
    const jobs = await holderTakesAll(s)
    const a = jobs[0]!
    const copy = (await poll(t, s.other.key, s.spare))!
    expect(copy).toMatchObject({ job_id: a.job_id, backup: true })
    expect(await shardsOf(s)).toContainEqual(
      expect.objectContaining({
        id: a.job_id,
        status: 'running',
        backup_worker_id: s.spare,
        backup_won: false,
      }),
    )

    // Progress from either copy, each fenced by its own assignment; the batch shows the copy ahead.
    expect((await progress(s, s.f.key, s.holder, a, 10)).status).toBe(200)
    expect((await progress(s, s.other.key, s.spare, copy, 5)).status).toBe(200)
    expect((await batchRow(t.deps, s.batch.id)).request_counts_completed).toBe(10)
    expect((await progress(s, s.other.key, s.spare, copy, 20, 1)).status).toBe(200)
    expect((await batchRow(t.deps, s.batch.id)).request_counts_completed).toBe(20)
    expect((await shardsOf(s))[0]!.request_counts).toMatchObject({ completed: 20, failed: 1 })
    expect(codeOf(await progress(s, s.other.key, s.spare, copy, 15, 1))).toEqual([400, 'counts_decreased'])
    expect((await progress(s, s.f.key, s.holder, a, 12)).status).toBe(200)
    expect(codeOf(await progress(s, s.f.key, s.holder, a, 11))).toEqual([400, 'counts_decreased'])
    expect(
      codeOf(await progress(s, s.other.key, s.spare, { ...copy, assignment_id: a.assignment_id }, 25)),
    ).toEqual([403, 'stale_assignment'])

    // The backup's output (its own usage: 7 tokens a line) completes the shard.
    const backupUsage = { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 }
    const lineOf = (id: string) => (Number(id.slice(4)) <= 30 ? okLine(id, backupUsage) : okLine(id))
    const won = await send(s, s.other.key, s.spare, copy, lineOf)
    expect(won.status).toBe(200)
    expect(won.body).toMatchObject({
      job_id: a.job_id,
      request_counts: { total: 30, completed: 30, failed: 0 },
    })
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'done',
      worker_id: s.spare,
      backup_worker_id: s.holder,
      backup_won: true,
      request_counts: { completed: 30, failed: 0 },
    })
    expect((await batchRow(t.deps, s.batch.id)).request_counts_completed).toBe(30)

    // The holder's copy lost: every later write is a 409 shard_done_elsewhere, and changes nothing.
    const blobsBefore = (await strayBlobs(t.deps)).length
    expect(codeOf(await progress(s, s.f.key, s.holder, a, 29))).toEqual([409, 'shard_done_elsewhere'])
    expect(codeOf(await send(s, s.f.key, s.holder, a))).toEqual([409, 'shard_done_elsewhere'])
    expect(codeOf(await report(s, s.f.key, s.holder, a))).toEqual([409, 'shard_done_elsewhere'])
    expect((await strayBlobs(t.deps)).length).toBe(blobsBefore)
    // Its assignment ended: not among its jobs, not taking a slot.
    const beat = await heartbeat(t, s.f.key, s.holder)
    expect(beat.body.assigned_job_ids.sort()).toEqual(
      jobs
        .slice(1)
        .map((j) => j.job_id)
        .sort(),
    )
    // The winner's repeat is the same 200.
    expect((await send(s, s.other.key, s.spare, copy, lineOf)).status).toBe(200)

    for (const job of jobs.slice(1)) expect((await send(s, s.f.key, s.holder, job)).status).toBe(200)
    const done = (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(done).toMatchObject({
      status: 'completed',
      request_counts: { total: 60, completed: 60, failed: 0 },
    })
    expect(done.error_file_id).toBeNull()

    // Byte for byte the output an unsplit run of the same results gives.
    const whole = app({ SHARD_MAX_REQUESTS: '0' })
    const wf = await makeFleet(whole)
    const wentry = await makeCatalogEntry(whole.deps, { runtime_model_id: s.runtimeId })
    const wbatch = await makeValidatedBatch(whole.deps, {
      userId: wf.user.id,
      model: wentry.id,
      customIds: s.ids,
    })
    const solo = await registerWorker(whole, wf.key, {
      models: [s.runtimeId],
      capabilities: { shards: true },
    })
    const wjob = (await poll(whole, wf.key, solo))!
    expect(wjob.job_id).toBe(wbatch.id)
    const wres = await upload(
      whole,
      wf.key,
      { job_id: wjob.job_id, worker_id: solo, assignment_id: wjob.assignment_id },
      s.ids.map(lineOf).join('\n'),
    )
    expect(wres.status).toBe(200)
    const unsplit = await readBlob(whole.deps, wres.body.output_file_id)
    expect(await readBlob(t.deps, done.output_file_id)).toBe(unsplit!)

    // Usage counts each request once: the backup's lines for shard A, the holder's for the rest.
    expect(done.request_counts).toEqual(wres.body.request_counts)
    const usage = (await t.req('GET', '/v1/usage?group_by=model', { token: s.f.user.token })).body.data
    expect(usage[0]).toMatchObject({ batches: 1, requests: 60, total_tokens: 30 * 7 + 30 * 12 })
    // Each org's usage counts the shards its own workers completed: the winner's, once.
    for (const [fleet, requests, tokens] of [
      [s.other, 30, 30 * 7],
      [s.f, 30, 30 * 12],
    ] as const) {
      const res = await t.req('GET', `/v1/orgs/${fleet.orgId}/usage?group_by=model`, {
        token: fleet.user.token,
      })
      expect(res.body.data).toEqual([expect.objectContaining({ batches: 1, requests, total_tokens: tokens })])
    }
    expect(await strayBlobs(t.deps)).toEqual([])
    expect([await metric(t, 'started'), await metric(t, 'won'), await metric(t, 'lost')]).toEqual([1, 1, 0])
  })

  test('the holder wins: the backup’s progress, upload and failure report get 409; the holder’s output stands', async () => {
    const t = app()
    const s = await setup(t)
    const jobs = await holderTakesAll(s)
    const a = jobs[0]!
    const copy = (await poll(t, s.other.key, s.spare))!
    expect((await progress(s, s.other.key, s.spare, copy, 3)).status).toBe(200)
    expect((await send(s, s.f.key, s.holder, a)).status).toBe(200)
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'done',
      worker_id: s.holder,
      backup_worker_id: s.spare,
      backup_won: false,
    })
    expect(codeOf(await progress(s, s.other.key, s.spare, copy, 4))).toEqual([409, 'shard_done_elsewhere'])
    expect(codeOf(await send(s, s.other.key, s.spare, copy))).toEqual([409, 'shard_done_elsewhere'])
    expect(codeOf(await report(s, s.other.key, s.spare, copy))).toEqual([409, 'shard_done_elsewhere'])
    // Its input too: a copy that had not even started reading hears why, not a bare 404.
    expect(codeOf(await t.req('GET', copy.input_path, { token: s.other.key }))).toEqual([
      409,
      'shard_done_elsewhere',
    ])
    expect((await t.req('GET', copy.input_path, { token: (await makeFleet(t)).key })).status).toBe(404)
    expect((await heartbeat(t, s.other.key, s.spare)).body.assigned_job_ids).toEqual([])
    // The spare worker's slot is free again: it backs up the next oldest running shard.
    expect(await poll(t, s.other.key, s.spare)).toMatchObject({ job_id: jobs[1]!.job_id, backup: true })
    expect(await batchRow(t.deps, s.batch.id)).toMatchObject({ request_counts_completed: 30, attempts: 0 })
    expect([await metric(t, 'started'), await metric(t, 'won'), await metric(t, 'lost')]).toEqual([2, 0, 1])
    // The batch completes once, from the holder's shards; the second backup loses too.
    for (const job of jobs.slice(1)) expect((await send(s, s.f.key, s.holder, job)).status).toBe(200)
    expect(await batchRow(t.deps, s.batch.id)).toMatchObject({
      status: 'completed',
      request_counts_completed: 60,
    })
    expect(await metric(t, 'lost')).toBe(2)
    expect(await strayBlobs(t.deps)).toEqual([])
  })
})

describe('docs/api.md §16 backup copies: one copy ending while the other runs', () => {
  test('the holder’s failure report promotes the backup: nothing is requeued, one attempt counted', async () => {
    const t = app()
    const s = await setup(t)
    const jobs = await holderTakesAll(s)
    const a = jobs[0]!
    const copy = (await poll(t, s.other.key, s.spare))!
    expect((await progress(s, s.f.key, s.holder, a, 12)).status).toBe(200)
    expect((await progress(s, s.other.key, s.spare, copy, 4)).status).toBe(200)
    const res = await report(s, s.f.key, s.holder, a, 'engine crashed')
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({ status: 'validated', batch_id: s.batch.id, attempts: 1 })
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'running',
      attempts: 1,
      worker_id: s.spare,
      backup_worker_id: null,
      request_counts: { completed: 4 },
    })
    // The batch keeps running, its live counts now the promoted copy's.
    expect(await batchRow(t.deps, s.batch.id)).toMatchObject({
      status: 'in_progress',
      attempts: 1,
      error: 'engine crashed',
      request_counts_completed: 4,
    })
    // The ended copy is a stale lease now; the promoted one carries on under its own assignment.
    expect(codeOf(await progress(s, s.f.key, s.holder, a, 13))).toEqual([403, 'not_assigned'])
    expect((await progress(s, s.other.key, s.spare, copy, 5)).status).toBe(200)
    // With one copy again, the shard may be backed up again (its attempts allow one more failure).
    const third = await registerWorker(t, s.f.key, {
      models: [s.runtimeId],
      max_concurrent_jobs: 8,
      capabilities: { shards: true },
    })
    expect(await poll(t, s.f.key, third)).toMatchObject({ job_id: a.job_id, backup: true })
    expect((await send(s, s.other.key, s.spare, copy)).status).toBe(200)
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'done',
      worker_id: s.spare,
      backup_worker_id: third,
    })
    expect([await metric(t, 'promoted'), await metric(t, 'lost')]).toEqual([1, 1])
    // Nothing was requeued.
    const text = (await t.req('GET', '/metrics')).text ?? ''
    expect(text).not.toContain('gridkeep_batch_requeues_total{')
  })

  test('the backup’s failure report ends only the backup: the holder carries on', async () => {
    const s = await setup(shared())
    const [a] = await holderTakesAll(s)
    const copy = (await poll(s.t, s.other.key, s.spare))!
    expect((await progress(s, s.other.key, s.spare, copy, 9)).status).toBe(200)
    expect((await batchRow(s.t.deps, s.batch.id)).request_counts_completed).toBe(9)
    const res = await report(s, s.other.key, s.spare, copy, 'out of memory')
    expect(res.body).toMatchObject({ status: 'validated', attempts: 1 })
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'running',
      attempts: 1,
      worker_id: s.holder,
      backup_worker_id: null,
    })
    expect(await batchRow(s.t.deps, s.batch.id)).toMatchObject({
      attempts: 1,
      error: 'out of memory',
      request_counts_completed: 0,
    })
    expect(codeOf(await progress(s, s.other.key, s.spare, copy, 10))).toEqual([403, 'not_assigned'])
    expect((await send(s, s.f.key, s.holder, a!)).status).toBe(200)
  })

  test('a silent holder’s shard is released the moment its backup finishes, not after the timeout', async () => {
    const t = app()
    t.deps.startedAt = 0 // past the startup grace: this test sweeps when it means to
    const s = await setup(t)
    const jobs = await holderTakesAll(s)
    // The spare worker backs up every shard in turn; the holder never says another word.
    for (const job of jobs) {
      const copy = (await poll(t, s.other.key, s.spare))!
      expect(copy).toMatchObject({ job_id: job.job_id, backup: true })
      expect((await send(s, s.other.key, s.spare, copy)).status).toBe(200)
    }
    // The batch is complete while the holder is still online to the server.
    expect((await batchRow(t.deps, s.batch.id)).status).toBe('completed')
    const workers = (await t.req('GET', `/v1/orgs/${s.f.orgId}/workers`, { token: s.f.user.token })).body.data
    expect(workers.find((w: { id: string }) => w.id === s.holder).status).toBe('online')
    // It holds nothing any more; when the sweeper finds it silent, there is nothing to requeue.
    expect((await shardsOf(s)).every((x) => x.worker_id === s.spare && x.backup_worker_id === s.holder)).toBe(
      true,
    )
    t.clock.advance(t.deps.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
    expect((await heartbeat(t, s.other.key, s.spare)).status).toBe(200)
    const pass = await sweep(t.deps)
    expect(pass.workers_offline).toEqual([s.holder])
    expect(pass).toMatchObject({ requeued: [], failed: [] })
    expect(await metric(t, 'won')).toBe(4)
  })

  test('the sweeper promotes the live backup of a silent holder, and requeues a shard whose copies are both silent', async () => {
    const t = app()
    t.deps.startedAt = 0
    const s = await setup(t)
    const [a, b, c] = await holderTakesAll(s)
    const copyA = (await poll(t, s.other.key, s.spare))!
    expect(copyA.job_id).toBe(a!.job_id)
    // A third worker backs up B, then goes silent with the holder.
    const third = await registerWorker(t, s.f.key, {
      models: [s.runtimeId],
      max_concurrent_jobs: 8,
      capabilities: { shards: true },
    })
    expect((await heartbeat(t, s.f.key, third)).status).toBe(200)
    const copyB = (await poll(t, s.f.key, third))!
    expect(copyB.job_id).toBe(b!.job_id)
    // And the spare worker backs up C too: C's holder silent, its backup live.
    const copyC = (await poll(t, s.other.key, s.spare))!
    expect(copyC.job_id).toBe(c!.job_id)
    t.clock.advance(t.deps.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
    expect((await heartbeat(t, s.other.key, s.spare)).status).toBe(200)
    const pass = await sweep(t.deps)
    expect(pass.workers_offline.sort()).toEqual([s.holder, third].sort())
    const listed = await shardsOf(s)
    // A and C: promoted, one attempt each; B: both copies silent — the holder's ended first, its
    // backup promoted, then that one's, requeuing B (two failed runs); D had one copy: requeued.
    expect(listed.map((x) => [x.status, x.worker_id, x.backup_worker_id, x.attempts])).toEqual([
      ['running', s.spare, null, 1],
      ['waiting', null, null, 2],
      ['running', s.spare, null, 1],
      ['waiting', null, null, 1],
    ])
    expect(pass.requeued).toEqual([s.batch.id, s.batch.id])
    expect(await batchRow(t.deps, s.batch.id)).toMatchObject({ status: 'in_progress', attempts: 2 })
    // The promoted copies upload under the assignments they were handed as backups.
    expect((await send(s, s.other.key, s.spare, copyA)).status).toBe(200)
    expect((await send(s, s.other.key, s.spare, copyC)).status).toBe(200)
    expect([await metric(t, 'promoted'), await metric(t, 'failed')]).toEqual([3, 0])
  })

  test('the sweeper ends a silent backup; its live holder carries on', async () => {
    const t = app()
    t.deps.startedAt = 0
    const s = await setup(t)
    const [a] = await holderTakesAll(s)
    const copy = (await poll(t, s.other.key, s.spare))!
    expect(copy.job_id).toBe(a!.job_id)
    t.clock.advance(t.deps.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
    expect((await heartbeat(t, s.f.key, s.holder)).status).toBe(200)
    const pass = await sweep(t.deps)
    expect(pass).toMatchObject({ workers_offline: [s.spare], requeued: [], failed: [] })
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'running',
      attempts: 1,
      worker_id: s.holder,
      backup_worker_id: null,
    })
    expect(await batchRow(t.deps, s.batch.id)).toMatchObject({
      status: 'in_progress',
      attempts: 1,
      error: `worker ${s.spare} went silent`,
    })
    expect(await metric(t, 'failed')).toBe(1)
    expect((await send(s, s.f.key, s.holder, a!)).status).toBe(200)
  })

  test('re-registering the backup’s worker ends its copy; the holder carries on', async () => {
    const s = await setup(shared())
    const [a] = await holderTakesAll(s)
    const copy = (await poll(s.t, s.other.key, s.spare))!
    expect(copy.job_id).toBe(a!.job_id)
    const res = await s.t.req('POST', '/workers/register', {
      token: s.other.key,
      body: {
        name: 'spare',
        worker_id: s.spare,
        runtimes: [],
        models: [s.runtimeId],
        capabilities: { shards: true },
      },
    })
    expect(res.status).toBe(200)
    expect((await shardsOf(s))[0]).toMatchObject({
      status: 'running',
      worker_id: s.holder,
      backup_worker_id: null,
    })
    expect((await send(s, s.f.key, s.holder, a!)).status).toBe(200)
  })
})

describe('docs/api.md §3 a removed worker’s shards: given back, no attempt counted', () => {
  const remove = (s: Setup, fleet: Fleet, wid: string) =>
    s.t.req('DELETE', `/v1/orgs/${fleet.orgId}/workers/${wid}`, { token: fleet.user.token })

  test('the only worker holding the shards: each waits again, and the batch is validated, attempts untouched', async () => {
    const s = await setup(shared())
    await holderTakesAll(s)
    const res = await remove(s, s.f, s.holder)
    expect(res.status).toBe(200)
    expect(res.body.requeued).toEqual([s.batch.id])
    expect((await shardsOf(s)).map((x) => [x.status, x.attempts, x.worker_id])).toEqual([
      ['waiting', 0, null],
      ['waiting', 0, null],
      ['waiting', 0, null],
      ['waiting', 0, null],
    ])
    expect(await batchRow(s.t.deps, s.batch.id)).toMatchObject({ status: 'validated', attempts: 0 })
  })

  test('the holder removed: its live backup holds the shard now; the backup removed: the holder carries on', async () => {
    const s = await setup(shared())
    const [a] = await holderTakesAll(s)
    const copy = (await poll(s.t, s.other.key, s.spare))!
    expect(copy.job_id).toBe(a!.job_id)
    expect((await remove(s, s.f, s.holder)).status).toBe(200)
    const [first, ...rest] = await shardsOf(s)
    expect(first).toMatchObject({
      status: 'running',
      attempts: 0,
      worker_id: s.spare,
      backup_worker_id: null,
    })
    expect(rest.map((x) => [x.status, x.attempts])).toEqual([
      ['waiting', 0],
      ['waiting', 0],
      ['waiting', 0],
    ])
    expect(await batchRow(s.t.deps, s.batch.id)).toMatchObject({ status: 'in_progress', attempts: 0 })
    // The promoted copy finishes the shard.
    expect((await send(s, s.other.key, s.spare, copy)).status).toBe(200)

    const t = await setup(shared())
    const [b] = await holderTakesAll(t)
    expect((await poll(t.t, t.other.key, t.spare))?.job_id).toBe(b!.job_id)
    expect((await remove(t, t.other, t.spare)).status).toBe(200)
    expect((await shardsOf(t))[0]).toMatchObject({
      status: 'running',
      attempts: 0,
      worker_id: t.holder,
      backup_worker_id: null,
    })
    expect((await send(t, t.f.key, t.holder, b!)).status).toBe(200)
  })
})
