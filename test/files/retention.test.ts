import { afterAll, describe, expect, test } from 'bun:test'
import { runOnce as retentionPass } from '../../src/services/retention'
import { makeTestApp, type TestApp } from '../helpers/app'
import { jsonl, line, uploadForm, validateAll } from '../helpers/batches'
import { blobExists, readBlob, storedEverything } from '../helpers/blobs'
import { makePersonalKey, makeUser } from '../helpers/builders'
import {
  errorLine,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload as uploadResults,
} from '../helpers/workers'

// docs/api.md §15 retention: OpenAI's expires_after on uploads, FILE_RETENTION_DAYS for the output and
// error files of finished batches, and the retention pass that deletes what expired (row and
// bytes), never a file that a batch which has not finished reads.

const apps: TestApp[] = []
afterAll(() => {
  for (const a of apps) a.close()
})
const app = (env: Record<string, string> = {}) => {
  const a = makeTestApp(env)
  apps.push(a)
  return a
}

const t = app({ FILE_RETENTION_DAYS: '2' })
const model = (await makeCatalogEntry(t.deps, { id: 'ret-8b-q4km', runtime_model_id: 'ret:8b' })).id
const CONTENT = jsonl([line('a', model), line('b', model)])

const ANCHOR = 'expires_after[anchor]'
const SECONDS = 'expires_after[seconds]'

/** The upload form with extra text fields (after the file, as a form may send them). */
function formWith(fields: [string, string][], content = CONTENT) {
  const form = uploadForm(content)
  for (const [k, v] of fields) form.append(k, v)
  return form
}

const uploadWith = (a: TestApp, token: string, fields: [string, string][]) =>
  a.req('POST', '/v1/files', { token, raw: formWith(fields) })

/** `name{labels}` → value, from GET /metrics. */
async function metric(a: TestApp, series: string): Promise<number> {
  const text = (await a.req('GET', '/metrics')).text
  const found = text.split('\n').find((l) => l.startsWith(`${series} `))
  return found ? Number(found.slice(series.length + 1)) : 0
}

describe('expires_after on POST /v1/files', () => {
  test('sets expires_at = created_at + seconds; from then on the file is gone for its owner', async () => {
    const u = await makeUser(t)
    const res = await uploadWith(t, u.token, [
      [ANCHOR, 'created_at'],
      [SECONDS, '3600'],
    ])
    expect(res.status).toBe(200)
    const created = t.clock.now()
    expect(res.body).toMatchObject({ created_at: created, expires_at: created + 3600 })
    const id = res.body.id as string
    const kept = await uploadWith(t, u.token, [])
    expect(kept.body.expires_at).toBeNull()

    const listed = async () =>
      ((await t.req('GET', '/v1/files', { token: u.token })).body.data as { id: string }[]).map((f) => f.id)
    t.clock.advance(3599)
    expect((await t.req('GET', `/v1/files/${id}`, { token: u.token })).body.expires_at).toBe(created + 3600)
    expect(await listed()).toContain(id)

    t.clock.advance(1)
    for (const path of [`/v1/files/${id}`, `/v1/files/${id}/content`]) {
      const gone = await t.req('GET', path, { token: u.token })
      expect(gone.status).toBe(404)
      expect(gone.body.error.code).toBe('file_not_found')
    }
    expect(await listed()).toEqual([kept.body.id])
    const batch = await t.req('POST', '/v1/batches', { token: u.token, body: { input_file_id: id } })
    expect(batch.status).toBe(404)
    expect(batch.body.error).toMatchObject({ code: 'file_not_found', param: 'input_file_id' })

    // The bytes go with the retention pass, and the metric counts it.
    const before = await metric(t, 'gridkeep_files_expired_total{purpose="batch"}')
    expect(await blobExists(t.deps, id)).toBe(true)
    expect((await retentionPass(t.deps)).expired).toEqual([id])
    expect(await blobExists(t.deps, id)).toBe(false)
    expect(await blobExists(t.deps, kept.body.id)).toBe(true)
    expect(await metric(t, 'gridkeep_files_expired_total{purpose="batch"}')).toBe(before + 1)
    expect((await retentionPass(t.deps)).expired).toEqual([])
  })

  test('the bounds of OpenAI’s range are accepted', async () => {
    const u = await makeUser(t)
    for (const seconds of [3600, 2_592_000]) {
      const res = await uploadWith(t, u.token, [
        [SECONDS, String(seconds)],
        [ANCHOR, 'created_at'],
      ])
      expect(res.status).toBe(200)
      expect(res.body.expires_at).toBe(t.clock.now() + seconds)
    }
  })

  const bad: [string, [string, string][], string, string][] = [
    [
      'an hour less a second',
      [
        [ANCHOR, 'created_at'],
        [SECONDS, '3599'],
      ],
      'invalid_value',
      SECONDS,
    ],
    [
      'thirty days and a second',
      [
        [ANCHOR, 'created_at'],
        [SECONDS, '2592001'],
      ],
      'invalid_value',
      SECONDS,
    ],
    [
      'negative',
      [
        [ANCHOR, 'created_at'],
        [SECONDS, '-3600'],
      ],
      'invalid_value',
      SECONDS,
    ],
    [
      'not a number',
      [
        [ANCHOR, 'created_at'],
        [SECONDS, 'soon'],
      ],
      'invalid_value',
      SECONDS,
    ],
    [
      'a fraction',
      [
        [ANCHOR, 'created_at'],
        [SECONDS, '3600.5'],
      ],
      'invalid_value',
      SECONDS,
    ],
    [
      'empty',
      [
        [ANCHOR, 'created_at'],
        [SECONDS, ''],
      ],
      'invalid_value',
      SECONDS,
    ],
    [
      'another anchor',
      [
        [ANCHOR, 'last_active_at'],
        [SECONDS, '3600'],
      ],
      'invalid_value',
      ANCHOR,
    ],
    ['seconds without anchor', [[SECONDS, '3600']], 'missing_field', ANCHOR],
    ['anchor without seconds', [[ANCHOR, 'created_at']], 'missing_field', SECONDS],
    [
      'anchor twice',
      [
        [ANCHOR, 'created_at'],
        [ANCHOR, 'created_at'],
        [SECONDS, '3600'],
      ],
      'invalid_value',
      ANCHOR,
    ],
    [
      'an unknown expires_after member',
      [['expires_after[days]', '1']],
      'unknown_field',
      'expires_after[days]',
    ],
  ]
  for (const [name, fields, code, param] of bad) {
    test(`${name} → 400 ${code}, nothing stored`, async () => {
      const u = await makeUser(t)
      const before = await storedEverything(t.deps)
      const res = await uploadWith(t, u.token, fields)
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code, param })
      expect(await storedEverything(t.deps)).toEqual(before)
      expect((await t.req('GET', '/v1/files', { token: u.token })).body.data).toEqual([])
    })
  }
})

let n = 0
/** A worker of a fresh fleet that has claimed a batch on `inputFileId` (or a fresh input). */
async function claimed(
  a: TestApp,
  o: { fleet?: Awaited<ReturnType<typeof makeFleet>>; batchId?: string } = {},
) {
  const f = o.fleet ?? (await makeFleet(a))
  const runtimeId = `ret:${++n}`
  const entry = await makeCatalogEntry(a.deps, { runtime_model_id: runtimeId })
  const batch = o.batchId ?? (await makeValidatedBatch(a.deps, { userId: f.user.id, model: entry.id })).id
  const wid = await registerWorker(a, f.key, { models: [runtimeId, 'ret:8b'] })
  const job = (await poll(a, f.key, wid))!
  expect(job.job_id).toBe(batch)
  return { f, wid, job }
}

const deliver = (a: TestApp, c: Awaited<ReturnType<typeof claimed>>, lines: string[]) =>
  uploadResults(
    a,
    c.f.key,
    { job_id: c.job.job_id, worker_id: c.wid, assignment_id: c.job.assignment_id },
    jsonl(lines),
  )

describe('FILE_RETENTION_DAYS', () => {
  test('output and error files expire that long after the batch finished; the batch keeps their ids', async () => {
    const c = await claimed(t)
    // A key, not a JWT: it outlives the two days.
    const { key } = await makePersonalKey(t, c.f.user)
    const res = await deliver(t, c, [okLine('req-1'), okLine('req-2'), errorLine('req-3')])
    expect(res.status).toBe(200)
    const finished = t.clock.now()
    const { output_file_id: out, error_file_id: err } = res.body
    for (const id of [out, err]) {
      const file = await t.req('GET', `/v1/files/${id}`, { token: key })
      expect(file.body).toMatchObject({ purpose: 'batch_output', expires_at: finished + 2 * 86_400 })
    }

    t.clock.advance(2 * 86_400 - 1)
    expect((await retentionPass(t.deps)).expired).not.toContain(out)
    t.clock.advance(1)
    const before = await metric(t, 'gridkeep_files_expired_total{purpose="batch_output"}')
    expect((await retentionPass(t.deps)).expired).toEqual(expect.arrayContaining([out, err]))
    expect(await metric(t, 'gridkeep_files_expired_total{purpose="batch_output"}')).toBe(before + 2)
    for (const id of [out, err]) {
      expect(await blobExists(t.deps, id)).toBe(false)
      expect((await t.req('GET', `/v1/files/${id}/content`, { token: key })).status).toBe(404)
    }
    // As OpenAI's do, the batch still names its files.
    const batch = await t.req('GET', `/v1/batches/${c.job.job_id}`, { token: key })
    expect(batch.body).toMatchObject({ status: 'completed', output_file_id: out, error_file_id: err })
  })

  test('0 keeps results until they are deleted', async () => {
    const a = app({ FILE_RETENTION_DAYS: '0' })
    const c = await claimed(a)
    const res = await deliver(a, c, [okLine('req-1'), okLine('req-2'), okLine('req-3')])
    expect(res.status).toBe(200)
    const file = await a.req('GET', `/v1/files/${res.body.output_file_id}`, { token: c.f.user.token })
    expect(file.body.expires_at).toBeNull()
    a.clock.advance(100 * 365 * 86_400)
    expect((await retentionPass(a.deps)).expired).toEqual([])
  })

  test('an expired input is kept while its batch runs (the worker still reads it), then deleted', async () => {
    const f = await makeFleet(t)
    const up = await t.req('POST', '/v1/files', {
      token: f.user.token,
      raw: formWith(
        [
          [ANCHOR, 'created_at'],
          [SECONDS, '3600'],
        ],
        jsonl([line('req-1', model)]),
      ),
    })
    expect(up.status).toBe(200)
    const created = await t.req('POST', '/v1/batches', {
      token: f.user.token,
      body: { input_file_id: up.body.id },
    })
    expect(created.status).toBe(200)
    await validateAll(t)
    const c = await claimed(t, { fleet: f, batchId: created.body.id })

    t.clock.advance(7200)
    expect((await retentionPass(t.deps)).expired).not.toContain(up.body.id)
    // Gone for its owner, still there for the worker holding the batch.
    expect((await t.req('GET', `/v1/files/${up.body.id}`, { token: f.user.token })).status).toBe(404)
    const input = await t.req('GET', `/v1/files/${up.body.id}/content`, { token: f.key })
    expect(input.status).toBe(200)
    expect(await readBlob(t.deps, up.body.id)).toBe(jsonl([line('req-1', model)]))

    expect((await deliver(t, c, [okLine('req-1')])).status).toBe(200)
    expect((await retentionPass(t.deps)).expired).toContain(up.body.id)
    expect(await blobExists(t.deps, up.body.id)).toBe(false)
  })
})

describe('gridkeep_stored_bytes', () => {
  test('the bytes of stored files by purpose, at scrape time', async () => {
    const a = app()
    const u = await makeUser(a)
    expect(await metric(a, 'gridkeep_stored_bytes{purpose="batch"}')).toBe(0)
    expect((await uploadWith(a, u.token, [])).status).toBe(200)
    expect((await uploadWith(a, u.token, [])).status).toBe(200)
    expect(await metric(a, 'gridkeep_stored_bytes{purpose="batch"}')).toBe(2 * Buffer.byteLength(CONTENT))
    expect(await metric(a, 'gridkeep_stored_bytes{purpose="batch_output"}')).toBe(0)
  })
})
