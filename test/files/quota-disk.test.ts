import { afterAll, describe, expect, test } from 'bun:test'
import { type DiskProbe, noDiskProbe } from '../../src/lib/disk'
import { newId } from '../../src/lib/ids'
import { makeTestApp, type TestApp } from '../helpers/app'
import { jsonl, uploadForm } from '../helpers/batches'
import { countWrites, storedEverything } from '../helpers/blobs'
import { makeUser } from '../helpers/builders'
import { capturedLogLines } from '../helpers/secrets'
import {
  batchRow,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload as uploadResults,
} from '../helpers/workers'

// docs/api.md §15: USER_STORAGE_QUOTA_BYTES (400 quota_exceeded) and MIN_FREE_DISK_BYTES (507
// insufficient_storage, through the free-space probe on Deps that these tests stand in for).

const apps: TestApp[] = []
afterAll(() => {
  for (const a of apps) a.close()
})
const app = (env: Record<string, string> = {}) => {
  const a = makeTestApp(env)
  apps.push(a)
  return a
}

const BOUNDARY = 'gk-test-boundary'
const HEAD =
  `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
  `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n` +
  'Content-Type: application/jsonl\r\n\r\n'
const TAIL = `\r\n--${BOUNDARY}--\r\n`

/**
 * POST /v1/files with a streamed body: the form head, then `fileBytes` bytes of file in 100-byte
 * pieces (for ever when `endless`), then the tail. `declared` sets a Content-Length. `pulled`
 * counts the bytes the server asked for.
 */
function streamedUpload(
  a: TestApp,
  token: string,
  o: { fileBytes?: number; endless?: boolean; declared?: number },
) {
  const seen = { pulled: 0 }
  let left = o.fileBytes ?? 0
  let stage: 'head' | 'file' | 'tail' | 'done' = 'head'
  const enc = new TextEncoder()
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      const piece =
        stage === 'head'
          ? enc.encode(HEAD)
          : stage === 'file'
            ? enc.encode('x'.repeat(o.endless ? 100 : Math.min(100, left)))
            : enc.encode(TAIL)
      seen.pulled += piece.length
      if (stage === 'head') stage = 'file'
      else if (stage === 'file' && !o.endless) {
        left -= piece.length
        if (left <= 0) stage = 'tail'
      } else if (stage === 'tail') stage = 'done'
      if (stage === 'done' && piece.length === 0) return c.close()
      c.enqueue(piece)
      if (stage === 'done') c.close()
    },
  })
  const headers: Record<string, string> = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }
  if (o.declared !== undefined) headers['content-length'] = String(o.declared)
  return { seen, res: a.req('POST', '/v1/files', { token, raw: body, headers }) }
}

/** The multipart body of a form, with its exact Content-Length. */
async function sized(form: FormData) {
  const r = new Request('http://localhost/', { method: 'POST', body: form })
  const type = r.headers.get('content-type')!
  const body = new Uint8Array(await r.arrayBuffer())
  return { body, headers: { 'content-type': type, 'content-length': String(body.length) } }
}

const fixedFree = (bytes: number | null): DiskProbe => ({ freeBytes: async () => bytes })

describe('USER_STORAGE_QUOTA_BYTES', () => {
  const q = app({ USER_STORAGE_QUOTA_BYTES: '1000' })

  test('uploads fill the quota exactly; one byte more is 400 quota_exceeded and leaves nothing', async () => {
    const u = await makeUser(q)
    expect(
      (await q.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x'.repeat(600)) })).status,
    ).toBe(200)
    expect(
      (await q.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x'.repeat(400)) })).status,
    ).toBe(200)
    const before = await storedEverything(q.deps)
    const res = await q.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x') })
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({
      type: 'invalid_request_error',
      code: 'quota_exceeded',
      param: 'file',
    })
    expect(await storedEverything(q.deps)).toEqual(before)
    expect((await q.req('GET', '/v1/files', { token: u.token })).body.data).toHaveLength(2)
    // Another user's room is their own.
    const other = await makeUser(q)
    expect(
      (await q.req('POST', '/v1/files', { token: other.token, raw: uploadForm('x'.repeat(1000)) })).status,
    ).toBe(200)
  })

  test('decided up front from Content-Length: the body is not read', async () => {
    const u = await makeUser(q)
    const writes = countWrites(q.deps)
    // The stream never ends: reading it would never answer.
    const { seen, res } = streamedUpload(q, u.token, { endless: true, declared: 100_000 })
    const r = await res
    expect(r.status).toBe(400)
    expect(r.body.error.code).toBe('quota_exceeded')
    expect(r.headers.get('connection')).toBe('close')
    expect(writes.bytes).toBe(0)
    expect(seen.pulled).toBeLessThan(1000)
  })

  test('decided while streaming when there is no Content-Length: nothing partial is left', async () => {
    const u = await makeUser(q)
    const before = await storedEverything(q.deps)
    const writes = countWrites(q.deps)
    const { res } = streamedUpload(q, u.token, { fileBytes: 5000 })
    const r = await res
    expect(r.status).toBe(400)
    expect(r.body.error.code).toBe('quota_exceeded')
    // It stopped at the quota, not at the end of the body.
    expect(writes.bytes).toBeLessThanOrEqual(1000)
    expect(await storedEverything(q.deps)).toEqual(before)
  })

  test('every file the owner has counts, outputs included; deleting one makes room', async () => {
    const u = await makeUser(q)
    const outputId = newId('file-')
    await q.deps.store.files.insert({
      id: outputId,
      user_id: u.id,
      filename: 'batch_x_output.jsonl',
      purpose: 'batch_output',
      bytes: 900,
      created_at: q.clock.now(),
    })
    const refused = await q.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x'.repeat(200)) })
    expect(refused.body.error?.code).toBe('quota_exceeded')
    expect((await q.req('DELETE', `/v1/files/${outputId}`, { token: u.token })).status).toBe(200)
    expect(
      (await q.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x'.repeat(200)) })).status,
    ).toBe(200)
  })
})

describe('MIN_FREE_DISK_BYTES', () => {
  const MIN = 1_000_000
  const d = app({ MIN_FREE_DISK_BYTES: String(MIN) })

  test('POST /v1/files below it → 507 insufficient_storage with Retry-After; nothing written or read', async () => {
    const u = await makeUser(d)
    d.deps.disk = fixedFree(MIN - 1)
    const writes = countWrites(d.deps)
    const { seen, res } = streamedUpload(d, u.token, { endless: true, declared: 10_000 })
    const r = await res
    expect(r.status).toBe(507)
    expect(r.body.error).toMatchObject({ type: 'server_error', code: 'insufficient_storage' })
    expect(r.headers.get('retry-after')).toBe('30')
    expect(r.headers.get('connection')).toBe('close')
    expect(writes.bytes).toBe(0)
    expect(seen.pulled).toBeLessThan(1000)
    expect((await d.req('GET', '/v1/files', { token: u.token })).body.data).toEqual([])
  })

  test('the declared size counts: what would leave less than the floor is refused, what leaves it is not', async () => {
    const u = await makeUser(d)
    const { body, headers } = await sized(uploadForm(jsonl(['{"custom_id":"a"}'])))
    d.deps.disk = fixedFree(MIN + body.length - 1)
    expect((await d.req('POST', '/v1/files', { token: u.token, raw: body.slice(), headers })).status).toBe(
      507,
    )
    d.deps.disk = fixedFree(MIN + body.length)
    const ok = await d.req('POST', '/v1/files', { token: u.token, raw: body.slice(), headers })
    expect(ok.body.error).toBeUndefined()
    expect(ok.status).toBe(200)
  })

  test('a probe that cannot answer refuses nothing (and is logged)', async () => {
    const u = await makeUser(d)
    d.deps.disk = {
      freeBytes: async () => {
        throw Object.assign(new Error('statfs failed'), { code: 'EIO' })
      },
    }
    const before = capturedLogLines().length
    expect((await d.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x') })).status).toBe(200)
    const logged = capturedLogLines()
      .slice(before)
      .map((l) => JSON.parse(l))
    expect(logged.filter((l) => l.msg === 'free disk space could not be measured')).toHaveLength(1)
  })

  test('an unmeasured disk (S3) is never refused', async () => {
    const u = await makeUser(d)
    d.deps.disk = noDiskProbe
    expect((await d.req('POST', '/v1/files', { token: u.token, raw: uploadForm('x') })).status).toBe(200)
  })

  test('upload-results below it → 507; the batch stays held with its attempts; the same upload succeeds later', async () => {
    const f = await makeFleet(d)
    const entry = await makeCatalogEntry(d.deps, { runtime_model_id: 'disk:8b' })
    const batch = await makeValidatedBatch(d.deps, { userId: f.user.id, model: entry.id, requests: 2 })
    const wid = await registerWorker(d, f.key, { models: ['disk:8b'] })
    const job = (await poll(d, f.key, wid))!
    expect(job.job_id).toBe(batch.id)
    const fields = { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id }
    const output = jsonl([okLine('req-1'), okLine('req-2')])

    d.deps.disk = fixedFree(MIN - 1)
    const before = await storedEverything(d.deps)
    const full = await uploadResults(d, f.key, fields, output)
    expect(full.status).toBe(507)
    expect(full.body.error.code).toBe('insufficient_storage')
    expect(await storedEverything(d.deps)).toEqual(before)
    expect(await batchRow(d.deps, batch.id)).toMatchObject({ status: 'in_progress', attempts: 0 })
    const held = await d.deps.store.queue.batchWithAssignment(batch.id)
    expect(held.assignment).toMatchObject({ id: job.assignment_id, worker_id: wid, completed_at: null })
    const beat = await heartbeat(d, f.key, wid, { activity: 'busy', current_job_id: batch.id })
    expect(beat.body.assigned_job_ids).toEqual([batch.id])

    d.deps.disk = fixedFree(MIN)
    const ok = await uploadResults(d, f.key, fields, output)
    expect(ok.status).toBe(200)
    expect(ok.body).toMatchObject({
      status: 'completed',
      request_counts: { total: 2, completed: 2, failed: 0 },
    })
    expect(await batchRow(d.deps, batch.id)).toMatchObject({ status: 'completed', attempts: 0 })
  })
})
