import { afterAll, describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { readInputIds } from '../../src/modules/workers/results'
import { makeTestApp } from '../helpers/app'
import { readBlob, storedEverything, strayBlobs } from '../helpers/blobs'
import { makePersonalKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'
import {
  batchRow,
  errorLine,
  type Fleet,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
  uploadForm,
  workerRow,
} from '../helpers/workers'

const t = makeTestApp()
afterAll(() => t.close())

let n = 0
/** A fleet whose worker has claimed a fresh batch of `requests` requests (custom ids req-1…). */
async function claimed(requests = 3, fleet?: Fleet) {
  const f = fleet ?? (await makeFleet(t))
  const runtimeId = `res:${++n}`
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: runtimeId })
  const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, requests })
  const wid = await registerWorker(t, f.key, { models: [runtimeId] })
  const job = (await poll(t, f.key, wid))!
  expect(job.job_id).toBe(batch.id)
  return { f, wid, batch, job, entry, runtimeId }
}

const storedFiles = () => storedEverything(t.deps)
const fileRowsOf = (batchId: string) => {
  const { db, tables } = rowsOf(t.deps)
  return db.select().from(tables.files).where(eq(tables.files.batch_id, batchId))
}
const assignmentsOf = (batchId: string) => {
  const { db, tables } = rowsOf(t.deps)
  return db.select().from(tables.batchAssignments).where(eq(tables.batchAssignments.batch_id, batchId))
}

describe('POST /workers/progress', () => {
  test('updates request counts live', async () => {
    const { f, wid, job } = await claimed(10)
    const res = await t.req('POST', '/workers/progress', {
      token: f.key,
      body: {
        worker_id: wid,
        job_id: job.job_id,
        assignment_id: job.assignment_id,
        total_prompts: 10,
        completed_prompts: 4,
        failed_prompts: 1,
      },
    })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ status: 'ok' })
    expect(await batchRow(t.deps, job.job_id)).toMatchObject({
      request_counts_completed: 4,
      request_counts_failed: 1,
    })
  })

  test('negative, decreasing, above-total counts and a wrong total are 400 and change nothing', async () => {
    const { f, wid, job } = await claimed(10)
    const send = (o: Record<string, unknown>) =>
      t.req('POST', '/workers/progress', { token: f.key, body: { worker_id: wid, job_id: job.job_id, ...o } })
    expect((await send({ completed_prompts: 5, failed_prompts: 2 })).status).toBe(200)
    const cases: [Record<string, unknown>, string | null][] = [
      [{ completed_prompts: -1, failed_prompts: 0 }, 'invalid_value'],
      [{ completed_prompts: 4, failed_prompts: 2 }, 'counts_decreased'],
      [{ completed_prompts: 5, failed_prompts: 1 }, 'counts_decreased'],
      [{ completed_prompts: 9, failed_prompts: 2 }, 'counts_exceed_total'],
      [{ completed_prompts: 6, failed_prompts: 2, total_prompts: 11 }, 'total_mismatch'],
      [{ completed_prompts: 6 }, 'missing_field'],
      [{ completed_prompts: 6, failed_prompts: 2, bogus: 1 }, 'unknown_field'],
    ]
    for (const [body, code] of cases) {
      const res = await send(body)
      expect(res.status).toBe(400)
      expect(res.body.error.code).toBe(code)
    }
    expect(await batchRow(t.deps, job.job_id)).toMatchObject({
      request_counts_completed: 5,
      request_counts_failed: 2,
    })
  })

  test('not the holder → 403; another org’s worker → 403; unknown worker → 404; a JWT → 401', async () => {
    const { f, job } = await claimed(3)
    const sameOrg = await registerWorker(t, f.key)
    const other = await makeFleet(t)
    const otherWorker = await registerWorker(t, other.key)
    const body = (worker_id: string) => ({
      worker_id,
      job_id: job.job_id,
      completed_prompts: 1,
      failed_prompts: 0,
    })
    const notHolder = await t.req('POST', '/workers/progress', { token: f.key, body: body(sameOrg) })
    expect(notHolder.status).toBe(403)
    expect(notHolder.body.error.code).toBe('not_assigned')
    expect((await t.req('POST', '/workers/progress', { token: f.key, body: body(otherWorker) })).status).toBe(
      403,
    )
    expect(
      (await t.req('POST', '/workers/progress', { token: other.key, body: body(otherWorker) })).status,
    ).toBe(403)
    expect(
      (await t.req('POST', '/workers/progress', { token: f.key, body: body('wrk_unknown') })).status,
    ).toBe(404)
    expect(
      (await t.req('POST', '/workers/progress', { token: f.user.token, body: body(sameOrg) })).status,
    ).toBe(401)
    expect((await batchRow(t.deps, job.job_id)).request_counts_completed).toBe(0)
  })
})

describe('POST /workers/report-failure', () => {
  test('requeues with attempts + 1 and the error stored, truncated to 2000 characters', async () => {
    const { f, wid, job } = await claimed(3)
    const long = '😀'.repeat(2500)
    const res = await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: { worker_id: wid, job_id: job.job_id, assignment_id: job.assignment_id, error: long },
    })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      status: 'validated',
      batch_id: job.job_id,
      attempts: 1,
      error: '😀'.repeat(2000),
    })
    expect(await batchRow(t.deps, job.job_id)).toMatchObject({
      status: 'validated',
      attempts: 1,
      error: '😀'.repeat(2000),
    })
    expect(await assignmentsOf(job.job_id)).toEqual([])
  })

  test('the third failure is terminal: failed, completed_at and failed_at stamped, every request failed', async () => {
    const { f, wid, job } = await claimed(7)
    let last: any
    for (let attempt = 1; attempt <= 3; attempt++) {
      if (attempt > 1) expect((await poll(t, f.key, wid))?.job_id).toBe(job.job_id)
      await t.req('POST', '/workers/progress', {
        token: f.key,
        body: { worker_id: wid, job_id: job.job_id, completed_prompts: 2, failed_prompts: 1 },
      })
      t.clock.advance(5)
      last = await t.req('POST', '/workers/report-failure', {
        token: f.key,
        body: { worker_id: wid, job_id: job.job_id, error: `crash ${attempt}` },
      })
      expect(last.status).toBe(200)
      expect(last.body.attempts).toBe(attempt)
      if (attempt < 3) expect((await batchRow(t.deps, job.job_id)).request_counts_completed).toBe(0)
    }
    expect(last.body).toEqual({ status: 'failed', batch_id: job.job_id, attempts: 3, error: 'crash 3' })
    expect(await batchRow(t.deps, job.job_id)).toMatchObject({
      status: 'failed',
      attempts: 3,
      completed_at: t.clock.now(),
      failed_at: t.clock.now(),
      request_counts_total: 7,
      request_counts_failed: 7,
      request_counts_completed: 0,
    })
    expect(await poll(t, f.key, wid)).toBeNull()
  }, 10_000)

  test('not the holder → 403 and nothing changes; bad body → 400', async () => {
    const { f, job } = await claimed(3)
    const intruder = await registerWorker(t, f.key)
    const res = await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: { worker_id: intruder, job_id: job.job_id, error: 'nope' },
    })
    expect(res.status).toBe(403)
    expect(await batchRow(t.deps, job.job_id)).toMatchObject({ status: 'in_progress', attempts: 0 })
    const unknownBatch = await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: { worker_id: intruder, job_id: 'batch_nope', error: 'x' },
    })
    expect(unknownBatch.status).toBe(403)
    expect(
      (await t.req('POST', '/workers/report-failure', { token: f.key, body: { worker_id: intruder } }))
        .status,
    ).toBe(400)
  })
})

describe('fencing with assignment_id', () => {
  test('a stale run of the same worker after requeue and re-claim can write nothing', async () => {
    const { f, wid, job } = await claimed(4)
    await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: { worker_id: wid, job_id: job.job_id, assignment_id: job.assignment_id, error: 'first run died' },
    })
    const again = (await poll(t, f.key, wid))!
    expect(again.job_id).toBe(job.job_id)
    expect(again.assignment_id).not.toBe(job.assignment_id)
    const before = await batchRow(t.deps, job.job_id)
    const filesBefore = await storedFiles()

    const stale = { worker_id: wid, job_id: job.job_id, assignment_id: job.assignment_id }
    const p = await t.req('POST', '/workers/progress', {
      token: f.key,
      body: { ...stale, completed_prompts: 1, failed_prompts: 0 },
    })
    expect(p.status).toBe(403)
    expect(p.body.error.code).toBe('stale_assignment')
    const u = await upload(
      t,
      f.key,
      stale,
      ['req-1', 'req-2', 'req-3', 'req-4'].map((id) => okLine(id)).join('\n'),
    )
    expect(u.status).toBe(403)
    const r = await t.req('POST', '/workers/report-failure', {
      token: f.key,
      body: { ...stale, error: 'late' },
    })
    expect(r.status).toBe(403)

    expect(await batchRow(t.deps, job.job_id)).toEqual(before)
    expect(await storedFiles()).toEqual(filesBefore)
    // The current run still works.
    const ok = await t.req('POST', '/workers/progress', {
      token: f.key,
      body: {
        worker_id: wid,
        job_id: job.job_id,
        assignment_id: again.assignment_id,
        completed_prompts: 1,
        failed_prompts: 0,
      },
    })
    expect(ok.status).toBe(200)
  })
})

describe('upload-results: the fence and the form, whatever the field order', () => {
  /** A batch requeued and claimed again by the same worker: `stale` is the first run's assignment. */
  async function reclaimed() {
    const c = await claimed(2)
    await t.req('POST', '/workers/report-failure', {
      token: c.f.key,
      body: { worker_id: c.wid, job_id: c.job.job_id, assignment_id: c.job.assignment_id, error: 'died' },
    })
    const again = (await poll(t, c.f.key, c.wid))!
    expect(again.assignment_id).not.toBe(c.job.assignment_id)
    return { ...c, stale: c.job.assignment_id, current: again.assignment_id }
  }
  const output = `${okLine('req-1')}\n${okLine('req-2')}\n`
  /** The ids before the file, assignment_id after it (docs/api.md §7 fencing must still hold). */
  function lateFence(jobId: string, workerId: string, assignmentId: string, idsFirst = true) {
    const form = new FormData()
    if (idsFirst) {
      form.append('job_id', jobId)
      form.append('worker_id', workerId)
    }
    form.append('file', new Blob([output]), 'out.jsonl')
    if (!idsFirst) {
      form.append('job_id', jobId)
      form.append('worker_id', workerId)
    }
    form.append('assignment_id', assignmentId)
    return form
  }

  for (const idsFirst of [true, false]) {
    test(`a stale assignment_id sent after the file is 403 and changes nothing (ids ${idsFirst ? 'before' : 'after'} the file)`, async () => {
      const { f, wid, job, stale, current } = await reclaimed()
      const before = await batchRow(t.deps, job.job_id)
      const filesBefore = await storedFiles()
      const res = await t.req('POST', '/workers/upload-results', {
        token: f.key,
        raw: lateFence(job.job_id, wid, stale, idsFirst),
      })
      expect(res.status).toBe(403)
      expect(res.body.error.code).toBe('stale_assignment')
      expect(await batchRow(t.deps, job.job_id)).toEqual(before)
      expect(await fileRowsOf(job.job_id)).toEqual([])
      expect(await storedFiles()).toEqual(filesBefore)
      // The current run, with the same field order, completes the batch.
      const ok = await t.req('POST', '/workers/upload-results', {
        token: f.key,
        raw: lateFence(job.job_id, wid, current, idsFirst),
      })
      expect(ok.status).toBe(200)
      expect((await batchRow(t.deps, job.job_id)).status).toBe('completed')
    })
  }

  const refused: [string, (ids: Record<string, string>) => FormData, string, string][] = [
    [
      'a field sent twice',
      (ids) => {
        const form = uploadForm(ids, output)
        form.append('completed', '2')
        form.append('completed', '2')
        return form
      },
      'invalid_value',
      'completed',
    ],
    [
      'a field over 1024 bytes',
      (ids) => uploadForm({ ...ids, assignment_id: 'a'.repeat(2000) }, output),
      'invalid_value',
      'assignment_id',
    ],
    [
      'twenty surplus fields',
      (ids) => {
        const form = uploadForm(ids, output)
        for (let i = 0; i < 20; i++) form.append('failed', '0')
        return form
      },
      'invalid_value',
      'failed',
    ],
  ]
  for (const [name, form, code, param] of refused) {
    test(`${name} is a 400, not a silent drop, and changes nothing`, async () => {
      const { f, wid, job } = await claimed(2)
      const filesBefore = await storedFiles()
      const res = await t.req('POST', '/workers/upload-results', {
        token: f.key,
        raw: form({ job_id: job.job_id, worker_id: wid }),
      })
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({ code, param })
      expect((await batchRow(t.deps, job.job_id)).status).toBe('in_progress')
      expect(await storedFiles()).toEqual(filesBefore)
    })
  }
})

describe('upload-results: output ids are matched to input ids exactly', () => {
  test('with every id hashing alike, only the exact input ids are found, each once', async () => {
    const { batch } = await claimed(3)
    const ids = await readInputIds(t.deps, batch, () => 7)
    try {
      expect(ids.answer('req-9')).toBe('unknown')
      expect(ids.answer('req-2')).toBe('ok')
      expect(ids.answer('req-2')).toBe('repeated')
      expect(ids.answer('req-')).toBe('unknown')
      expect(ids.unanswered()).toEqual(['req-1', 'req-3'])
    } finally {
      ids.close()
    }
  })
})

describe('POST /workers/upload-results', () => {
  test('splits output and error lines, writes missing_result lines, sums usage and completes the batch', async () => {
    const { f, wid, job, batch } = await claimed(4)
    const body = [
      okLine('req-1'),
      errorLine('req-2'),
      '',
      okLine('req-4', { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }),
    ].join('\r\n')
    t.clock.advance(30)
    const res = await upload(
      t,
      f.key,
      { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id, completed: 2, failed: 2 },
      body,
    )
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      batch_id: batch.id,
      status: 'completed',
      output_file_id: expect.stringMatching(/^file-/),
      error_file_id: expect.stringMatching(/^file-/),
      request_counts: { total: 4, completed: 2, failed: 2 },
      usage: { prompt_tokens: 6, completion_tokens: 9, total_tokens: 15 },
    })
    const out = (await readBlob(t.deps, res.body.output_file_id))!
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    const err = (await readBlob(t.deps, res.body.error_file_id))!
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
    expect(out.map((l) => l.custom_id)).toEqual(['req-1', 'req-4'])
    expect(err.map((l) => [l.custom_id, l.error?.code ?? l.response.status_code])).toEqual([
      ['req-2', 500],
      ['req-3', 'missing_result'],
    ])
    expect(out.length + err.length).toBe(4)
    expect(await batchRow(t.deps, batch.id)).toMatchObject({
      status: 'completed',
      completed_at: t.clock.now(),
      output_file_id: res.body.output_file_id,
      error_file_id: res.body.error_file_id,
      request_counts_completed: 2,
      request_counts_failed: 2,
    })
    const rows: unknown[][] = (await fileRowsOf(batch.id)).map((r) => [r.purpose, r.user_id, r.bytes])
    expect(rows.sort()).toEqual(
      [
        ['batch_output', f.user.id, await t.deps.blobs.size(res.body.error_file_id)],
        ['batch_output', f.user.id, await t.deps.blobs.size(res.body.output_file_id)],
      ].sort(),
    )
    const [a] = await assignmentsOf(batch.id)
    expect(a.completed_at).toBe(t.clock.now())
    expect((await heartbeat(t, f.key, wid)).body.assigned_job_ids).toEqual([])

    // A repeat upload is idempotent: the same 200, nothing new stored.
    const filesBefore = await storedFiles()
    const repeat = await upload(
      t,
      f.key,
      { job_id: job.job_id, worker_id: wid, completed: 2, failed: 2 },
      body,
    )
    expect(repeat.status).toBe(200)
    expect(repeat.body).toEqual(res.body)
    expect(await storedFiles()).toEqual(filesBefore)
  })

  test('fields after the file part are accepted (the file is spooled first)', async () => {
    const { f, wid, job } = await claimed(2)
    const form = new FormData()
    form.append('file', new Blob([`${okLine('req-1')}\n${okLine('req-2')}\n`]), 'out.jsonl')
    form.append('job_id', job.job_id)
    form.append('worker_id', wid)
    form.append('completed', '2')
    const res = await t.req('POST', '/workers/upload-results', { token: f.key, raw: form })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({
      request_counts: { total: 2, completed: 2, failed: 0 },
      error_file_id: null,
    })
  })

  test('count_mismatch and invalid_output are 400 and change nothing', async () => {
    const { f, wid, job } = await claimed(3)
    const before = await batchRow(t.deps, job.job_id)
    const filesBefore = await storedFiles()
    const fields = { job_id: job.job_id, worker_id: wid }
    const good = [okLine('req-1'), okLine('req-2'), okLine('req-3')].join('\n')
    const invalidUtf8 = new Uint8Array([...Buffer.from(`${okLine('req-1')}\n"`), 0xff, 0xfe, 0x22, 10])
    const cases: [Record<string, string | number>, string | Uint8Array, string][] = [
      [{ completed: 2 }, good, 'count_mismatch'],
      [{ failed: 1 }, good, 'count_mismatch'],
      [{ completed: 'three' }, good, 'invalid_value'],
      [{}, `${okLine('req-1')}\nnot json\n`, 'invalid_output'],
      [{}, `${okLine('req-1')}\n[1,2]\n`, 'invalid_output'],
      [{}, `${okLine('req-1')}\n${okLine('req-9')}\n`, 'invalid_output'],
      [{}, `${okLine('req-1')}\n${errorLine('req-1')}\n`, 'invalid_output'],
      [{}, invalidUtf8, 'invalid_output'],
    ]
    for (const [extra, content, code] of cases) {
      const res = await upload(t, f.key, { ...fields, ...extra }, content)
      expect(res.status).toBe(400)
      expect(res.body.error.code).toBe(code)
    }
    expect(await batchRow(t.deps, job.job_id)).toEqual(before)
    expect(await fileRowsOf(job.job_id)).toEqual([])
    expect(await storedFiles()).toEqual(filesBefore)
  })

  test('malformed requests: not multipart, no file, unknown field, missing ids → 400', async () => {
    const { f, wid, job } = await claimed(1)
    const json = await t.req('POST', '/workers/upload-results', {
      token: f.key,
      body: { job_id: job.job_id },
    })
    expect(json.status).toBe(400)
    const noFile = new FormData()
    noFile.append('job_id', job.job_id)
    noFile.append('worker_id', wid)
    expect(
      (await t.req('POST', '/workers/upload-results', { token: f.key, raw: noFile })).body.error.code,
    ).toBe('missing_field')
    expect(
      (await upload(t, f.key, { job_id: job.job_id, worker_id: wid, extra: 'x' }, okLine('req-1'))).body.error
        .code,
    ).toBe('unknown_field')
    expect((await upload(t, f.key, { worker_id: wid }, okLine('req-1'))).status).toBe(400)
    expect((await batchRow(t.deps, job.job_id)).status).toBe('in_progress')
  })

  test('not the holder → 403; another org → 403; unknown worker → 404; a personal key → 401', async () => {
    const { f, wid, job } = await claimed(1)
    const sameOrg = await registerWorker(t, f.key)
    const other = await makeFleet(t)
    const personal = await makePersonalKey(t, f.user)
    const content = okLine('req-1')
    expect((await upload(t, f.key, { job_id: job.job_id, worker_id: sameOrg }, content)).status).toBe(403)
    expect((await upload(t, other.key, { job_id: job.job_id, worker_id: wid }, content)).status).toBe(403)
    expect((await upload(t, f.key, { job_id: job.job_id, worker_id: 'wrk_nope' }, content)).status).toBe(404)
    expect((await upload(t, personal.key, { job_id: job.job_id, worker_id: wid }, content)).status).toBe(401)
    expect((await batchRow(t.deps, job.job_id)).status).toBe('in_progress')
  })

  test('an upload over MAX_UPLOAD_BYTES is 413 and changes nothing', async () => {
    const small = makeTestApp({ MAX_UPLOAD_BYTES: '2000' })
    try {
      const f = await makeFleet(small)
      const entry = await makeCatalogEntry(small.deps, { runtime_model_id: 'big-upload:1' })
      const batch = await makeValidatedBatch(small.deps, { userId: f.user.id, model: entry.id, requests: 40 })
      const wid = await registerWorker(small, f.key, { models: ['big-upload:1'] })
      expect((await poll(small, f.key, wid))?.job_id).toBe(batch.id)
      const content = Array.from({ length: 40 }, (_, i) => okLine(`req-${i + 1}`)).join('\n')
      const res = await upload(small, f.key, { job_id: batch.id, worker_id: wid }, content)
      expect(res.status).toBe(413)
      expect(res.body.error.code).toBe('file_too_large')
      expect((await batchRow(small.deps, batch.id)).status).toBe('in_progress')
      expect(await strayBlobs(small.deps)).toEqual([])
    } finally {
      small.close()
    }
  })

  test('an upload with no successful line stores only an error file', async () => {
    const { f, wid, job } = await claimed(2)
    const res = await upload(
      t,
      f.key,
      { job_id: job.job_id, worker_id: wid, completed: 0, failed: 2 },
      errorLine('req-2'),
    )
    expect(res.status).toBe(200)
    expect(res.body.output_file_id).toBeNull()
    expect(res.body.request_counts).toEqual({ total: 2, completed: 0, failed: 2 })
  })
})

describe('POST /workers/model-progress', () => {
  test('is logged and counts as liveness (an offline worker is back online)', async () => {
    const f = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    const { db, tables } = rowsOf(t.deps)
    await db.update(tables.workers).set({ status: 'offline' }).where(eq(tables.workers.id, wid))
    t.clock.advance(60)
    const res = await t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: {
        worker_id: wid,
        model: 'llama3:70b',
        status: 'downloading',
        completed_bytes: 10,
        total_bytes: 100,
      },
    })
    expect(res.status).toBe(200)
    expect(await workerRow(t.deps, wid)).toMatchObject({ status: 'online', last_seen_at: t.clock.now() })
  })

  test('bad status → 400; unknown worker → 404; another org → 403', async () => {
    const f = await makeFleet(t)
    const other = await makeFleet(t)
    const wid = await registerWorker(t, f.key)
    const body = (o: Record<string, unknown>) => ({ worker_id: wid, model: 'm', status: 'downloading', ...o })
    expect(
      (await t.req('POST', '/workers/model-progress', { token: f.key, body: body({ status: 'paused' }) }))
        .status,
    ).toBe(400)
    expect(
      (await t.req('POST', '/workers/model-progress', { token: f.key, body: body({ worker_id: 'wrk_x' }) }))
        .status,
    ).toBe(404)
    expect(
      (await t.req('POST', '/workers/model-progress', { token: other.key, body: body({}) })).status,
    ).toBe(403)
  })
})
