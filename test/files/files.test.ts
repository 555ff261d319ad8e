import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { eq } from 'drizzle-orm'
import { newId } from '../../src/lib/ids'
import { makeTestApp } from '../helpers/app'
import {
  assignBatch,
  jsonl,
  line,
  makeBatch,
  makeCatalogEntry,
  makeFile,
  makeWorker,
  upload,
  uploadForm,
  validateAll,
} from '../helpers/batches'
import { blobExists, readBlob, storedEverything, writeBlob } from '../helpers/blobs'
import { makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

// docs/api.md §5 Files: upload (multipart, streamed to DATA_DIR/files/<id>), list, get, delete, and
// the content download with its reader rules.

const t = makeTestApp({ MAX_UPLOAD_BYTES: '1000' })
afterAll(() => t.close())

const model = (await makeCatalogEntry(t, { id: 'files-7b-q4km' })).id
const CONTENT = jsonl([line('a', model), line('b', model)])

describe('POST /v1/files', () => {
  test('stores the bytes under the file id and returns the OpenAI file object', async () => {
    const u = await makeUser(t)
    const res = await upload(t, u.token, CONTENT, 'my batch.jsonl')
    expect(res.status).toBe(200)
    expect(res.body).toEqual({
      id: expect.stringMatching(/^file-[0-9A-Za-z]{24}$/),
      object: 'file',
      bytes: Buffer.byteLength(CONTENT),
      created_at: t.clock.now(),
      filename: 'my batch.jsonl',
      purpose: 'batch',
      status: 'processed',
      expires_at: null,
    })
    expect(await readBlob(t.deps, res.body.id)).toBe(CONTENT)
    expect(await storedEverything(t.deps)).toEqual([res.body.id])
  })

  test('works with a personal key; the purpose field may come after the file', async () => {
    const u = await makeUser(t)
    const { key } = await makePersonalKey(t, u)
    const form = new FormData()
    form.append('file', new Blob([CONTENT]), 'late.jsonl')
    form.append('purpose', 'batch')
    const res = await t.req('POST', '/v1/files', { token: key, raw: form })
    expect(res.status).toBe(200)
    expect(res.body.filename).toBe('late.jsonl')
  })

  test('a client filename is metadata only, never a path', async () => {
    const u = await makeUser(t)
    for (const name of ['../../etc/passwd.jsonl', '..\\..\\windows\\evil.jsonl', '/abs/path/x.jsonl']) {
      const res = await upload(t, u.token, CONTENT, name)
      expect(res.status).toBe(200)
      expect(res.body.filename).not.toContain('/')
      expect(res.body.filename).not.toContain('\\')
      expect(res.body.filename.endsWith('.jsonl')).toBe(true)
      expect(await blobExists(t.deps, res.body.id)).toBe(true)
    }
    expect(existsSync(`${t.config.DATA_DIR}/etc`)).toBe(false)
    expect((await storedEverything(t.deps)).every((f) => f.startsWith('file-'))).toBe(true)
  })

  test('exactly MAX_UPLOAD_BYTES is accepted; one byte more is 413 file_too_large and leaves nothing', async () => {
    const u = await makeUser(t)
    const before = (await storedEverything(t.deps)).length
    const ok = await upload(t, u.token, 'x'.repeat(1000))
    expect(ok.status).toBe(200)
    expect(ok.body.bytes).toBe(1000)
    const res = await upload(t, u.token, 'x'.repeat(1001))
    expect(res.status).toBe(413)
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'file_too_large' })
    expect((await storedEverything(t.deps)).length).toBe(before + 1)
  })

  const bad: [string, () => FormData | string, number, string, string | null][] = [
    ['not .jsonl', () => uploadForm(CONTENT, 'input.csv'), 400, 'invalid_file_type', 'file'],
    ['no filename extension', () => uploadForm(CONTENT, 'jsonl'), 400, 'invalid_file_type', 'file'],
    ['empty file', () => uploadForm('', 'e.jsonl'), 400, 'empty_file', 'file'],
    ['missing purpose', () => uploadForm(CONTENT, 'a.jsonl', null), 400, 'missing_field', 'purpose'],
    [
      'purpose other than batch',
      () => uploadForm(CONTENT, 'a.jsonl', 'fine-tune'),
      400,
      'invalid_value',
      'purpose',
    ],
    [
      'missing file',
      () => {
        const f = new FormData()
        f.append('purpose', 'batch')
        return f
      },
      400,
      'missing_field',
      'file',
    ],
    [
      'file sent as a plain field',
      () => {
        const f = new FormData()
        f.append('purpose', 'batch')
        f.append('file', 'text')
        return f
      },
      400,
      'invalid_value',
      'file',
    ],
    [
      'unknown field',
      () => {
        const f = uploadForm(CONTENT)
        f.append('owner', 'someone')
        return f
      },
      400,
      'unknown_field',
      'owner',
    ],
  ]
  for (const [name, form, status, code, param] of bad) {
    test(`${name} → ${status} ${code}`, async () => {
      const u = await makeUser(t)
      const before = (await storedEverything(t.deps)).length
      const res = await t.req('POST', '/v1/files', { token: u.token, raw: form() })
      expect(res.status).toBe(status)
      expect(res.body.error).toMatchObject({ code, param })
      expect((await storedEverything(t.deps)).length).toBe(before)
    })
  }

  test('a JSON body or a malformed multipart body is a 400', async () => {
    const u = await makeUser(t)
    const json = await t.req('POST', '/v1/files', { token: u.token, body: { purpose: 'batch' } })
    expect(json.status).toBe(400)
    expect(json.body.error.code).toBe('invalid_content_type')
    const broken = await t.req('POST', '/v1/files', {
      token: u.token,
      raw: '--xyz\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--xy',
      headers: { 'content-type': 'multipart/form-data; boundary=xyz' },
    })
    expect(broken.status).toBe(400)
    expect(broken.body.error.code).toBe('invalid_multipart')
    const noBoundary = await t.req('POST', '/v1/files', {
      token: u.token,
      raw: 'abc',
      headers: { 'content-type': 'multipart/form-data' },
    })
    expect(noBoundary.status).toBe(400)
  })

  test('a declared Content-Length far over the cap is refused before reading', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', '/v1/files', {
      token: u.token,
      raw: uploadForm('x'.repeat(200_000)),
    })
    expect(res.status).toBe(413)
  })

  test('credentials: none → 401, worker key → 401', async () => {
    const u = await makeUser(t)
    const wk = await makeWorkerKey(t, u, u.personalOrgId)
    expect((await t.req('POST', '/v1/files', { raw: uploadForm(CONTENT) })).status).toBe(401)
    expect((await t.req('POST', '/v1/files', { token: wk.key, raw: uploadForm(CONTENT) })).status).toBe(401)
  })
})

describe('GET /v1/files, GET and DELETE /v1/files/{id}', () => {
  test('lists own files newest first, paginated, filtered by purpose', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    await makeFile(t, other, CONTENT)
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push(await makeFile(t, u, CONTENT))
    const out = await insertOutputFile(u.id)
    const page1 = await t.req('GET', '/v1/files?limit=2', { token: u.token })
    expect(page1.status).toBe(200)
    expect(page1.body).toMatchObject({ object: 'list', has_more: true, first_id: out, last_id: ids[4] })
    const page2 = await t.req('GET', `/v1/files?limit=2&after=${page1.body.last_id}`, { token: u.token })
    expect(page2.body.data.map((f: any) => f.id)).toEqual([ids[3], ids[2]])
    const all = await t.req('GET', '/v1/files?limit=100', { token: u.token })
    expect(all.body.data.map((f: any) => f.id)).toEqual([out, ...ids.reverse()])
    const outputs = await t.req('GET', '/v1/files?purpose=batch_output', { token: u.token })
    expect(outputs.body.data).toEqual([expect.objectContaining({ id: out, purpose: 'batch_output' })])
    expect((await t.req('GET', '/v1/files?purpose=other', { token: u.token })).status).toBe(400)
    expect((await t.req('GET', '/v1/files?limit=0', { token: u.token })).status).toBe(400)
  })

  test('get: owner and superadmin see it; another user gets 404', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    const admin = await makeSuperadmin(t)
    const id = await makeFile(t, u, CONTENT)
    expect((await t.req('GET', `/v1/files/${id}`, { token: u.token })).body).toMatchObject({
      id,
      object: 'file',
    })
    expect((await t.req('GET', `/v1/files/${id}`, { token: admin.token })).status).toBe(200)
    const res = await t.req('GET', `/v1/files/${id}`, { token: other.token })
    expect(res.status).toBe(404)
    expect(res.body.error.type).toBe('not_found_error')
    expect((await t.req('GET', '/v1/files/file-nope', { token: u.token })).status).toBe(404)
    expect((await t.req('GET', `/v1/files/${id}`)).status).toBe(401)
  })

  test('delete removes the row and the bytes; another user gets 404', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    const id = await makeFile(t, u, CONTENT)
    expect((await t.req('DELETE', `/v1/files/${id}`, { token: other.token })).status).toBe(404)
    const res = await t.req('DELETE', `/v1/files/${id}`, { token: u.token })
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ id, object: 'file', deleted: true })
    expect(await blobExists(t.deps, id)).toBe(false)
    expect((await t.req('GET', `/v1/files/${id}`, { token: u.token })).status).toBe(404)
    expect((await t.req('DELETE', `/v1/files/${id}`, { token: u.token })).status).toBe(404)
  })

  test('delete is refused with file_in_use while an unfinished batch reads the file', async () => {
    const u = await makeUser(t)
    const batch = await makeBatch(t, u, CONTENT)
    const res = await t.req('DELETE', `/v1/files/${batch.input_file_id}`, { token: u.token })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('file_in_use')
    expect(await blobExists(t.deps, batch.input_file_id)).toBe(true)
    await validateAll(t) // → validated: still in use
    expect((await t.req('DELETE', `/v1/files/${batch.input_file_id}`, { token: u.token })).status).toBe(400)
    // A failed (terminal) batch no longer holds its input.
    const failed = await makeBatch(t, u, 'garbage\n')
    await validateAll(t)
    expect((await t.req('DELETE', `/v1/files/${failed.input_file_id}`, { token: u.token })).status).toBe(200)
  })
})

async function insertOutputFile(userId: string, role: 'output' | 'error' = 'output') {
  const id = newId('file-')
  await writeBlob(t.deps, id, '{"id":"out"}\n')
  await t.deps.store.files.insert({
    id,
    user_id: userId,
    filename: `batch_x_${role}.jsonl`,
    purpose: 'batch_output',
    bytes: 13,
    created_at: t.clock.now() + 1,
  })
  return id
}

describe('GET /v1/files/{id}/content', () => {
  const content = (id: string, token?: string) => t.req('GET', `/v1/files/${id}/content`, { token })

  test('the owner and a superadmin get the raw bytes as application/jsonl; others 404', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    const admin = await makeSuperadmin(t)
    const { key } = await makePersonalKey(t, u)
    const id = await makeFile(t, u, CONTENT)
    for (const token of [u.token, key, admin.token]) {
      const res = await content(id, token)
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('application/jsonl')
      expect(res.text).toBe(CONTENT)
    }
    expect((await content(id, other.token)).status).toBe(404)
    expect((await content(id)).status).toBe(401)
  })

  test('output and error files written by the workers workstream are readable by their owner', async () => {
    const u = await makeUser(t)
    const out = await insertOutputFile(u.id, 'output')
    const err = await insertOutputFile(u.id, 'error')
    expect((await content(out, u.token)).text).toBe('{"id":"out"}\n')
    expect((await content(err, u.token)).status).toBe(200)
    // docs/api.md §5: error files are batch_output too, as OpenAI's are.
    expect((await t.req('GET', `/v1/files/${err}`, { token: u.token })).body.purpose).toBe('batch_output')
  })

  test('a worker key reads the input only while a worker of its org holds the batch', async () => {
    const u = await makeUser(t)
    const fleetOwner = await makeUser(t)
    const key = (await makeWorkerKey(t, fleetOwner, fleetOwner.personalOrgId)).key
    const strangerKey = (await makeWorkerKey(t, u, u.personalOrgId)).key
    const batch = await makeBatch(t, u, CONTENT)
    expect((await content(batch.input_file_id, key)).status).toBe(404) // validating: nobody holds it
    await validateAll(t)
    expect((await content(batch.input_file_id, key)).status).toBe(404) // validated: still unheld
    const worker = await makeWorker(t, fleetOwner.personalOrgId)
    await assignBatch(t, batch.id, worker)
    const res = await content(batch.input_file_id, key)
    expect(res.status).toBe(200)
    expect(res.text).toBe(CONTENT)
    // A worker key of another org, even the file owner's own org, is not a reader.
    expect((await content(batch.input_file_id, strangerKey)).status).toBe(404)
    // Nor does holding one batch open any other file.
    const otherFile = await makeFile(t, u, CONTENT)
    expect((await content(otherFile, key)).status).toBe(404)
    // Once the assignment is gone (requeue deletes it, docs/api.md §6) access ends.
    const { db, tables } = rowsOf(t.deps)
    await db.delete(tables.batchAssignments).where(eq(tables.batchAssignments.batch_id, batch.id))
    expect((await content(batch.input_file_id, key)).status).toBe(404)
  })

  test('a completed assignment no longer grants access', async () => {
    const u = await makeUser(t)
    const key = (await makeWorkerKey(t, u, u.personalOrgId)).key
    const batch = await makeBatch(t, u, CONTENT)
    await validateAll(t)
    const asg = await assignBatch(t, batch.id, await makeWorker(t, u.personalOrgId))
    expect((await content(batch.input_file_id, key)).status).toBe(200)
    const { db, tables } = rowsOf(t.deps)
    await db
      .update(tables.batchAssignments)
      .set({ completed_at: 1 })
      .where(eq(tables.batchAssignments.id, asg.id))
    expect((await content(batch.input_file_id, key)).status).toBe(404)
  })

  test('a worker key is refused on the other file routes', async () => {
    const u = await makeUser(t)
    const key = (await makeWorkerKey(t, u, u.personalOrgId)).key
    const id = await makeFile(t, u, CONTENT)
    expect((await t.req('GET', `/v1/files/${id}`, { token: key })).status).toBe(401)
    expect((await t.req('GET', '/v1/files', { token: key })).status).toBe(401)
    expect((await t.req('DELETE', `/v1/files/${id}`, { token: key })).status).toBe(401)
  })
})
