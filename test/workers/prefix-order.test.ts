import { afterAll, describe, expect, test } from 'bun:test'
import type { Job } from '../../src/modules/workers/claim'
import { makeTestApp, type TestApp } from '../helpers/app'
import { jsonl, makeBatch, validateAll } from '../helpers/batches'
import { makeUser } from '../helpers/builders'
import {
  batchRow,
  type Fleet,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// docs/api.md §6 "Execution order" and §16: a batch runs in the order of its prompts' shared
// prefixes, decided at validation and stored with it; its shards are runs of that order, and each
// worker continues its own prefix groups.

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

/** A document of ~1,200 characters: lines about one document share it as their prompt's prefix. */
const doc = (d: number) => `Document ${d}. ${`Sentence ${d} of the document, which goes on. `.repeat(28)}`

/** docs × questions, question-major: for every question, every document (custom_id `d<doc>-q<q>`). */
function questionMajor(model: string, docs: number, questions: number) {
  const lines: string[] = []
  for (let q = 0; q < questions; q++)
    for (let d = 0; d < docs; d++)
      lines.push(
        JSON.stringify({
          custom_id: `d${d}-q${q}`,
          body: {
            model,
            messages: [
              { role: 'system', content: 'Answer from the document.' },
              { role: 'user', content: `${doc(d)}\nQuestion ${q}: what does it say?` },
            ],
          },
        }),
      )
  return lines
}

/** The ids of questionMajor's lines, in the file's order. */
const fileOrder = (docs: number, questions: number) =>
  Array.from({ length: questions }, (_, q) => Array.from({ length: docs }, (_, d) => `d${d}-q${q}`)).flat()

/** The same ids in document-major order: the order a trie walk of the prompts gives. */
const documentMajor = (docs: number, questions: number) =>
  Array.from({ length: docs }, (_, d) => Array.from({ length: questions }, (_, q) => `d${d}-q${q}`)).flat()

let n = 0
/** A user's batch of `lines`, validated, and `workers` shard-capable workers of its model. */
async function setup(
  t: TestApp,
  content: (model: string) => string[],
  workers = 1,
  capabilities: { shards?: boolean } = { shards: true },
) {
  const f: Fleet = await makeFleet(t)
  const runtimeId = `prefix-model:${++n}`
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: runtimeId })
  const batch = await makeBatch(t, f.user, jsonl(content(entry.id)))
  await validateAll(t)
  const wids: string[] = []
  for (let i = 0; i < workers; i++) {
    const wid = await registerWorker(t, f.key, {
      name: `gpu-${i}`,
      models: [runtimeId],
      max_concurrent_jobs: 4,
      capabilities,
    })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    wids.push(wid)
  }
  return { t, f, batch, workers: wids }
}

/** The custom_ids a job's input_path serves, in the order served. */
async function inputIds(t: TestApp, key: string, path: string) {
  const res = await t.req('GET', path, { token: key })
  expect(res.status).toBe(200)
  return (res.text ?? '')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l).custom_id as string)
}

/** Each job's lines uploaded as succeeded, in the order given; the batch after the last. */
async function uploadAll(
  s: Awaited<ReturnType<typeof setup>>,
  jobs: { worker: string; job: Job; ids: string[] }[],
) {
  for (const { worker, job, ids } of jobs) {
    const res = await upload(
      s.t,
      s.f.key,
      { job_id: job.job_id, worker_id: worker, assignment_id: job.assignment_id },
      ids.map((id) => okLine(id)).join('\n'),
    )
    expect(res.status).toBe(200)
  }
  return (await s.t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
}

describe('docs/api.md §6 the execution order is decided at validation and stored', () => {
  test('documents × questions in question-major order run document-major: the whole batch’s input_path serves that order', async () => {
    const s = await setup(app(), (m) => questionMajor(m, 4, 3))
    const row = await batchRow(s.t.deps, s.batch.id)
    expect(row.status).toBe('validated')
    expect(row.ordered).toBe(true)
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(job.job_id).toBe(s.batch.id)
    expect(job.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content?batch=${s.batch.id}`)
    expect(await inputIds(s.t, s.f.key, job.input_path)).toEqual(documentMajor(4, 3))
    // The owner reads it too; another user gets a 404, as for the file.
    expect(await inputIds(s.t, s.f.user.token, job.input_path)).toEqual(documentMajor(4, 3))
    const stranger = await makeUser(s.t)
    expect((await s.t.req('GET', job.input_path, { token: stranger.token })).status).toBe(404)
    // The file itself is unchanged.
    expect(await inputIds(s.t, s.f.key, `/v1/files/${s.batch.input_file_id}/content`)).toEqual(
      fileOrder(4, 3),
    )
  })

  test('docs/api.md §7 input_path: a worker that did not declare shards gets the plain path and runs the file order', async () => {
    const s = await setup(app(), (m) => questionMajor(m, 4, 3), 1, {})
    expect((await batchRow(s.t.deps, s.batch.id)).ordered).toBe(true)
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(job.job_id).toBe(s.batch.id)
    expect(job.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content`)
    const ids = await inputIds(s.t, s.f.key, job.input_path)
    expect(ids).toEqual(fileOrder(4, 3))
    // Its results in the file order complete the batch: the output comes in the order it ran.
    const res = await upload(
      s.t,
      s.f.key,
      { job_id: job.job_id, worker_id: s.workers[0]!, assignment_id: job.assignment_id },
      ids.map((id) => okLine(id)).join('\n'),
    )
    expect(res.status).toBe(200)
    const batch = (await s.t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(batch).toMatchObject({ status: 'completed', request_counts: { total: 12, completed: 12 } })
    expect(await inputIds(s.t, s.f.user.token, `/v1/files/${batch.output_file_id}/content`)).toEqual(ids)
  })

  test('a batch whose order is the file’s stores none: the plain input_path', async () => {
    const s = await setup(app(), (m) => questionMajor(m, 1, 12))
    expect((await batchRow(s.t.deps, s.batch.id)).ordered).toBe(false)
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(job.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content`)
    // The trie walk of one document's lines is the file order itself.
    expect(
      await inputIds(s.t, s.f.key, `/v1/files/${s.batch.input_file_id}/content?batch=${s.batch.id}`),
    ).toEqual(documentMajor(1, 12))
  })

  test('PREFIX_ORDER=false runs the file order', async () => {
    const s = await setup(app({ PREFIX_ORDER: 'false' }), (m) => questionMajor(m, 4, 3))
    expect((await batchRow(s.t.deps, s.batch.id)).ordered).toBe(false)
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    expect(job.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content`)
    expect(await inputIds(s.t, s.f.key, job.input_path)).toEqual(fileOrder(4, 3))
  })
})

describe('docs/api.md §16 shards are runs of the execution order', () => {
  test('each worker continues its own groups; a group lands on one worker, two at most at an edge; the output comes in execution order', async () => {
    // 10 documents × 12 questions: 120 lines, each document a group of 12.
    const s = await setup(app(), (m) => questionMajor(m, 10, 12), 2)
    const order = documentMajor(10, 12)
    const [w1, w2] = s.workers as [string, string]
    const jobs: { worker: string; job: Job; ids: string[] }[] = []
    const take = async (worker: string) => {
      const job = await poll(s.t, s.f.key, worker)
      if (!job?.shard || job.backup) return null
      const ids = await inputIds(s.t, s.f.key, job.input_path)
      jobs.push({ worker, job, ids })
      return { job, ids }
    }
    // w1 takes the first half (guided: 120 ÷ 2); w2 comes second and starts halfway through the rest,
    // leaving w1 its continuation.
    const a = (await take(w1))!
    expect(a.job.shard).toMatchObject({ first_request: 0, requests: 60 })
    const b = (await take(w2))!
    expect(b.job.shard).toMatchObject({ first_request: 90, requests: 30 })
    // w1 continues where its shard ends, until it meets w2's.
    const c = (await take(w1))!
    expect(c.job.shard).toMatchObject({ first_request: 60 })
    while (await take(w1));
    expect(await take(w2)).toBeNull()
    // Each shard's lines are its run of the execution order.
    for (const { job, ids } of jobs)
      expect(ids).toEqual(
        order.slice(job.shard!.first_request, job.shard!.first_request + job.shard!.requests),
      )
    expect(jobs.flatMap((j) => j.ids).sort()).toEqual([...order].sort())
    // w1's shards are one contiguous run: [0, 90).
    const mine = jobs.filter((j) => j.worker === w1).map((j) => j.job.shard!)
    expect(mine.map((x) => x.first_request)).toEqual(
      mine.map((_, i) => mine.slice(0, i).reduce((sum, x) => sum + x.requests, 0)),
    )
    // A document's lines are on one worker, or on both only at the edge between them (document 7).
    for (let d = 0; d < 10; d++) {
      const holders = new Set(
        jobs.filter((j) => j.ids.some((id) => id.startsWith(`d${d}-`))).map((j) => j.worker),
      )
      expect(holders.size).toBe(d === 7 ? 2 : 1)
    }

    // Results uploaded in any order: the output file runs in execution order, shard by shard.
    const batch = await uploadAll(s, [...jobs].reverse())
    expect(batch).toMatchObject({
      status: 'completed',
      request_counts: { total: 120, completed: 120, failed: 0 },
    })
    const output = await inputIds(s.t, s.f.user.token, `/v1/files/${batch.output_file_id}/content`)
    expect(output).toEqual(order)
  })

  test('PREFIX_ORDER=false: a question-major batch split in several shards runs contiguous runs of the file order', async () => {
    // 10 documents × 12 questions, question-major: the file order is not the trie walk's.
    const s = await setup(app({ PREFIX_ORDER: 'false' }), (m) => questionMajor(m, 10, 12), 2)
    expect((await batchRow(s.t.deps, s.batch.id)).ordered).toBe(false)
    const file = await inputIds(s.t, s.f.user.token, `/v1/files/${s.batch.input_file_id}/content`)
    expect(file).toEqual(fileOrder(10, 12))
    const [w1, w2] = s.workers as [string, string]
    const jobs: { worker: string; job: Job; ids: string[] }[] = []
    for (let turn = 0; ; turn++) {
      const worker = turn % 2 ? w2 : w1
      const job = await poll(s.t, s.f.key, worker)
      if (!job?.shard || job.backup) break
      jobs.push({ worker, job, ids: await inputIds(s.t, s.f.key, job.input_path) })
    }
    expect(jobs.length).toBeGreaterThan(2)
    // Each shard is the file's lines [first_request, first_request + requests), cut one after another.
    let next = 0
    for (const { job, ids } of jobs) {
      expect(job.input_path).toBe(`/v1/files/${s.batch.input_file_id}/content?shard=${job.job_id}`)
      expect(job.shard!.first_request).toBe(next)
      expect(ids).toEqual(file.slice(next, next + job.shard!.requests))
      next += job.shard!.requests
    }
    expect(next).toBe(120)
    // Results uploaded in any order: the output file is the file order.
    const batch = await uploadAll(s, [...jobs].reverse())
    expect(batch.status).toBe('completed')
    expect(await inputIds(s.t, s.f.user.token, `/v1/files/${batch.output_file_id}/content`)).toEqual(file)
  })

  test('a shard upload checks its custom_ids against its own lines of the order', async () => {
    const s = await setup(app(), (m) => questionMajor(m, 10, 12))
    const job = (await poll(s.t, s.f.key, s.workers[0]!))!
    const ids = await inputIds(s.t, s.f.key, job.input_path)
    expect(ids).toEqual(documentMajor(10, 12).slice(0, job.total_requests))
    // An id of the file's first lines that is not in this shard's run is refused.
    const foreign = 'd9-q0'
    expect(ids).not.toContain(foreign)
    const res = await upload(
      s.t,
      s.f.key,
      { job_id: job.job_id, worker_id: s.workers[0]!, assignment_id: job.assignment_id },
      [...ids.slice(1), foreign].map((id) => okLine(id)).join('\n'),
    )
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('invalid_output')
    // Its own ids, one missing: accepted, the missing one an error line.
    const ok = await upload(
      s.t,
      s.f.key,
      { job_id: job.job_id, worker_id: s.workers[0]!, assignment_id: job.assignment_id },
      ids
        .slice(1)
        .map((id) => okLine(id))
        .join('\n'),
    )
    expect(ok.status).toBe(200)
    expect(ok.body.request_counts).toEqual({
      total: job.total_requests,
      completed: job.total_requests - 1,
      failed: 1,
    })
  })
})
