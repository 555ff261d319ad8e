import { afterAll, describe, expect, test } from 'bun:test'
import { BATCH_ENDPOINTS } from '../../src/domain/batch-line'
import { newId } from '../../src/lib/ids'
import { makeTestApp } from '../helpers/app'
import { jsonl, line, makeBatch, makeCatalogEntry, makeFile, validateAll } from '../helpers/batches'
import { makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

// docs/api.md §6 Batches: create (returns at once, `validating`), the OpenAI batch object, detail and
// list visibility (owner; superadmin sees all), filters and pagination; no cancel endpoint.

const t = makeTestApp()
afterAll(() => t.close())

const model = (await makeCatalogEntry(t, { id: 'batches-8b-q4km' })).id
const CONTENT = jsonl([line('a', model), line('b', model)])

describe('POST /v1/batches', () => {
  test('returns the batch at once, status validating, with exactly the docs/api.md §6 fields', async () => {
    const u = await makeUser(t)
    const fileId = await makeFile(t, u, CONTENT)
    const res = await t.req('POST', '/v1/batches', {
      token: u.token,
      body: { input_file_id: fileId, metadata: { project: 'demo' } },
    })
    expect(res.status).toBe(200)
    expect(Object.keys(res.body).sort()).toEqual(
      [
        'attempts',
        'completed_at',
        'completion_window',
        'created_at',
        'endpoint',
        'error',
        'error_file_id',
        'errors',
        'expires_at',
        'failed_at',
        'id',
        'in_progress_at',
        'input_file_id',
        'metadata',
        'model',
        'needs',
        'object',
        'output_file_id',
        'request_counts',
        'shards',
        'status',
        'usage',
        'waiting',
      ].sort(),
    )
    expect(res.body).toEqual({
      id: expect.stringMatching(/^batch_[0-9A-Za-z]{24}$/),
      object: 'batch',
      endpoint: '/v1/chat/completions',
      model: null,
      needs: [],
      input_file_id: fileId,
      completion_window: '24h',
      status: 'validating',
      output_file_id: null,
      error_file_id: null,
      created_at: t.clock.now(),
      in_progress_at: null,
      completed_at: null,
      failed_at: null,
      expires_at: null,
      attempts: 0,
      error: null,
      errors: { object: 'list', total: 0, data: [] },
      request_counts: { total: 0, completed: 0, failed: 0 },
      usage: null,
      metadata: { project: 'demo' },
      shards: null,
      waiting: null,
    })
  })

  test('accepts each endpoint and a completion window; a personal key works', async () => {
    const u = await makeUser(t)
    const { key } = await makePersonalKey(t, u)
    const fileId = await makeFile(t, u, CONTENT)
    for (const endpoint of BATCH_ENDPOINTS) {
      const res = await t.req('POST', '/v1/batches', {
        token: key,
        body: { input_file_id: fileId, endpoint, completion_window: '48h' },
      })
      expect(res.status).toBe(200)
      expect(res.body).toMatchObject({ endpoint, completion_window: '48h', metadata: null })
    }
  })

  test('bad bodies are 400 and create nothing', async () => {
    const u = await makeUser(t)
    const fileId = await makeFile(t, u, CONTENT)
    const tooMany = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']))
    const cases: [Record<string, unknown>, string | null][] = [
      [{}, 'input_file_id'],
      [{ input_file_id: fileId, endpoint: '/v1/moderations' }, 'endpoint'],
      [{ input_file_id: fileId, completion_window: 'forever' }, 'completion_window'],
      [{ input_file_id: fileId, metadata: tooMany }, 'metadata'],
      [{ input_file_id: fileId, metadata: { k: 'v'.repeat(513) } }, 'metadata'],
      [{ input_file_id: fileId, metadata: { k: 5 } }, 'metadata'],
      [{ input_file_id: fileId, metadata: { ['k'.repeat(65)]: 'v' } }, 'metadata'],
      [{ input_file_id: fileId, model: 'x' }, 'model'],
    ]
    for (const [body, param] of cases) {
      const res = await t.req('POST', '/v1/batches', { token: u.token, body })
      expect([res.status, res.body.error?.param?.split('.')[0]]).toEqual([400, param])
    }
    const list = await t.req('GET', '/v1/batches', { token: u.token })
    expect(list.body.data).toEqual([])
  })

  test('the input file must be the caller’s (404) and have purpose batch (400)', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    const theirs = await makeFile(t, other, CONTENT)
    const res = await t.req('POST', '/v1/batches', { token: u.token, body: { input_file_id: theirs } })
    expect(res.status).toBe(404)
    expect(res.body.error).toMatchObject({ code: 'file_not_found', param: 'input_file_id' })
    const out = newId('file-')
    const { db, tables } = rowsOf(t.deps)
    await db.insert(tables.files).values({
      id: out,
      user_id: u.id,
      filename: 'o.jsonl',
      purpose: 'batch_output',
      bytes: 1,
      created_at: 1,
    })
    const bad = await t.req('POST', '/v1/batches', { token: u.token, body: { input_file_id: out } })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe('invalid_file_purpose')
  })

  test('credentials: none → 401, worker key → 401', async () => {
    const u = await makeUser(t)
    const fileId = await makeFile(t, u, CONTENT)
    const wk = await makeWorkerKey(t, u, u.personalOrgId)
    expect((await t.req('POST', '/v1/batches', { body: { input_file_id: fileId } })).status).toBe(401)
    expect(
      (await t.req('POST', '/v1/batches', { token: wk.key, body: { input_file_id: fileId } })).status,
    ).toBe(401)
    expect((await t.req('GET', '/v1/batches', { token: wk.key })).status).toBe(401)
  })
})

describe('GET /v1/batches/{id} and GET /v1/batches', () => {
  test('detail: owner and superadmin; another user gets 404', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    const admin = await makeSuperadmin(t)
    const batch = await makeBatch(t, u, CONTENT)
    expect((await t.req('GET', `/v1/batches/${batch.id}`, { token: u.token })).body.id).toBe(batch.id)
    expect((await t.req('GET', `/v1/batches/${batch.id}`, { token: admin.token })).status).toBe(200)
    const res = await t.req('GET', `/v1/batches/${batch.id}`, { token: other.token })
    expect(res.status).toBe(404)
    expect(res.body.error.type).toBe('not_found_error')
    expect((await t.req('GET', '/v1/batches/batch_missing', { token: u.token })).status).toBe(404)
    expect((await t.req('GET', `/v1/batches/${batch.id}`)).status).toBe(401)
  })

  test('list: own batches newest first with cursor pagination and a status filter; superadmin sees all', async () => {
    const u = await makeUser(t)
    const other = await makeUser(t)
    const admin = await makeSuperadmin(t)
    const theirs = await makeBatch(t, other, CONTENT)
    const ids: string[] = []
    for (let i = 0; i < 3; i++) ids.push((await makeBatch(t, u, CONTENT)).id)
    const bad = await makeBatch(t, u, 'nonsense\n')
    await validateAll(t)
    const page1 = await t.req('GET', '/v1/batches?limit=2', { token: u.token })
    expect(page1.body).toMatchObject({ object: 'list', has_more: true, first_id: bad.id, last_id: ids[2] })
    const page2 = await t.req('GET', `/v1/batches?limit=2&after=${ids[2]}`, { token: u.token })
    expect(page2.body).toMatchObject({ has_more: false, data: [{ id: ids[1] }, { id: ids[0] }] })
    const failed = await t.req('GET', '/v1/batches?status=failed', { token: u.token })
    expect(failed.body.data.map((b: any) => b.id)).toEqual([bad.id])
    expect(failed.body.data[0].errors).toMatchObject({ total: 1, data: [{ code: 'invalid_json', line: 1 }] })
    // Another user's id is no cursor of mine.
    expect((await t.req('GET', `/v1/batches?after=${theirs.id}`, { token: u.token })).status).toBe(400)
    expect((await t.req('GET', '/v1/batches?status=cancelled', { token: u.token })).status).toBe(400)
    const all = await t.req('GET', '/v1/batches?limit=100', { token: admin.token })
    const seen = all.body.data.map((b: any) => b.id)
    expect(seen).toContain(theirs.id)
    expect(seen).toContain(ids[0])
  })

  test('there is no cancel endpoint (docs/api.md §6)', async () => {
    const u = await makeUser(t)
    const batch = await makeBatch(t, u, CONTENT)
    const res = await t.req('POST', `/v1/batches/${batch.id}/cancel`, { token: u.token })
    expect(res.status).toBe(404)
    expect((await t.req('GET', `/v1/batches/${batch.id}`, { token: u.token })).body.status).toBe('validating')
  })
})
