import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makeUser, newPassword, uniqueEmail } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

// Bad input gets a clear 4xx in the envelope, never a 5xx, and nothing stored changes.

const t = makeTestApp()
afterAll(() => t.close())

const count = (table: 'users' | 'organizations') => {
  const { db, tables } = rowsOf(t.deps)
  return db.$count(tables[table])
}

function expectEnvelope(res: { status: number; body: any }, status: number) {
  expect(res.status).toBe(status)
  expect(Object.keys(res.body)).toEqual(['error'])
  expect(Object.keys(res.body.error).sort()).toEqual(['code', 'message', 'param', 'type'])
  expect(res.body.error.message).toBeString()
  expect(JSON.stringify(res.body)).not.toContain('    at ') // no stack trace
}

describe('request bodies', () => {
  const signupRaw = (raw: string, contentType = 'application/json') =>
    t.req('POST', '/v1/auth/signup', { raw, headers: { 'content-type': contentType } })

  test.each([
    ['malformed JSON', '{"email": "a@b.c", ', 'application/json', 'invalid_json'],
    ['a JSON array', '[1,2,3]', 'application/json', null],
    ['a JSON string', '"hello"', 'application/json', null],
    [
      'form encoding',
      'email=a%40b.c&password=12345678&full_name=x',
      'application/x-www-form-urlencoded',
      'unsupported_media_type',
    ],
    ['plain text', '{"email":"a@b.c"}', 'text/plain', 'unsupported_media_type'],
    ['multipart to a JSON route', '--x\r\n\r\n--x--', 'multipart/form-data; boundary=x', null],
    ['binary garbage', '\u0000\u00ff\u00fe\u0001', 'application/json', 'invalid_json'],
  ])('%s → 400 and nothing stored', async (_name, raw, contentType, code) => {
    const users = await count('users')
    const res = await signupRaw(raw, contentType)
    expectEnvelope(res, 400)
    if (code) expect(res.body.error.code).toBe(code)
    expect(await count('users')).toBe(users)
  })

  test('wrong types → 400 naming the field, without echoing the value', async () => {
    const res = await t.req('POST', '/v1/auth/signup', {
      body: { email: uniqueEmail(), password: 12345678901, full_name: 'X' },
    })
    expectEnvelope(res, 400)
    expect(res.body.error).toMatchObject({ code: 'invalid_value', param: 'password' })
    expect(res.body.error.message).not.toContain('12345678901')
  })

  test('a NUL character in a string or a key → 400 on every engine, nothing stored', async () => {
    const u = await makeUser(t)
    const org = await t.req('POST', '/v1/orgs', { token: u.token, body: { name: 'a\u0000b' } })
    expect(org.status).toBe(400)
    expect(org.body.error.code).toBe('invalid_value')
    const key = await t.req('POST', '/v1/users/me/api-keys', { token: u.token, body: { name: 'k\u0000' } })
    expect(key.status).toBe(400)
    const meta = await t.req('POST', '/v1/batches', {
      token: u.token,
      body: { input_file_id: 'file-x', metadata: { 'a\u0000': 'b' } },
    })
    expect(meta.status).toBe(400)
    expect(
      (await t.req('GET', '/v1/orgs', { token: u.token })).body.data.map((o: { name: string }) => o.name),
    ).not.toContain('a\u0000b')
  })

  test('a 1 MB string → 400, nothing stored', async () => {
    const users = await count('users')
    const res = await t.req('POST', '/v1/auth/signup', {
      body: { email: uniqueEmail(), password: newPassword(), full_name: 'x'.repeat(1_000_000) },
    })
    expectEnvelope(res, 400)
    expect(res.body.error.param).toBe('full_name')
    expect(await count('users')).toBe(users)
  })

  test('a body over 4 MiB → 413', async () => {
    const res = await t.req('POST', '/v1/auth/login', {
      raw: JSON.stringify({ email: 'a@b.c', password: 'x'.repeat(5 * 1024 * 1024) }),
      headers: { 'content-type': 'application/json' },
    })
    expectEnvelope(res, 413)
  })

  test('JSON nested 10,000 levels deep → 400, not a crash', async () => {
    const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`
    const res = await t.req('POST', '/v1/auth/login', {
      raw: `{"email":"a@b.c","password":${deep}}`,
      headers: { 'content-type': 'application/json' },
    })
    expectEnvelope(res, 400)
  })

  test('brackets inside strings do not count as nesting', async () => {
    const res = await t.req('POST', '/v1/auth/signup', {
      body: { email: uniqueEmail(), password: newPassword(), full_name: `[{"\\${'['.repeat(150)}` },
    })
    expect(res.status).toBe(200)
    expect(res.body.full_name).toStartWith('[{"\\[[[')
  })

  test('unknown fields are rejected with the field named', async () => {
    const u = await makeUser(t)
    const orgs = await count('organizations')
    const res = await t.req('POST', '/v1/orgs', { token: u.token, body: { name: 'Lab', owner_id: 'user_x' } })
    expectEnvelope(res, 400)
    expect(res.body.error).toMatchObject({ code: 'unknown_field', param: 'owner_id' })
    expect(await count('organizations')).toBe(orgs)
  })

  test('nested unknown or invalid values name the dotted path', async () => {
    const u = await makeUser(t)
    const res = await t.req('PUT', '/v1/users/me/api-keys/key_x', {
      token: u.token,
      body: { expires_at: 'soon' },
    })
    expectEnvelope(res, 400)
    expect(res.body.error.param).toBe('expires_at')
  })
})

describe('routing and headers', () => {
  test('a NUL character in the path or the query is a 400 on every engine, before any lookup', async () => {
    const u = await makeUser(t)
    for (const path of ['/v1/batches/%00', '/v1/files?after=%00', '/v1/users/me/api-keys/batch_%00x']) {
      const res = await t.req('GET', path, { token: u.token })
      expectEnvelope(res, 400)
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_value' })
    }
    // The same ids without the NUL are an ordinary lookup.
    expect((await t.req('GET', '/v1/batches/batch_x', { token: u.token })).status).toBe(404)
  })

  test('every route that reads its URL (a path parameter or a query) refuses a NUL in it; the others never read it', async () => {
    const u = await makeUser(t)
    let checked = 0
    for (const r of t.app.routes) {
      if (r.method !== 'GET' || r.path === '/docs' || r.path === '/openapi.json') continue
      // A handler that reads a query without declaring its schema would be missed by the app's
      // rule (src/app.ts readsUrl), and is expected to be refused here all the same.
      const readsUrl =
        /[:*]/.test(r.path) ||
        (r.hooks as { query?: unknown }).query !== undefined ||
        /\bquery\b/.test(String(r.handler))
      const path = `${r.path.replace(/:[a-z_]+/g, '%00').replace('*', '%00')}?after=%00`
      const res = await t.req('GET', path, { token: u.token })
      const refused = res.status === 400 && res.body?.error?.code === 'invalid_value'
      expect([r.path, refused]).toEqual([r.path, readsUrl])
      if (readsUrl) checked++
    }
    expect(checked).toBeGreaterThan(10)
    // A query a route never reads is not its input: it answers as without it.
    expect((await t.req('GET', '/healthz?probe=%00')).status).toBe(200)
  })

  test('an unknown route is a 404 in the envelope', async () => {
    const res = await t.req('GET', '/v1/nope')
    expectEnvelope(res, 404)
    expect(res.body.error).toMatchObject({ type: 'not_found_error', code: 'route_not_found' })
  })

  test('every response carries X-Request-Id, echoing a well-formed client id', async () => {
    const ok = await t.req('GET', '/healthz', { headers: { 'x-request-id': 'client-abc.123' } })
    expect(ok.headers.get('x-request-id')).toBe('client-abc.123')
    const generated = await t.req('GET', '/healthz')
    expect(generated.headers.get('x-request-id')).toMatch(/^req_[0-9a-z]{17,}$/)
    const next = await t.req('GET', '/healthz')
    expect(next.headers.get('x-request-id')).not.toBe(generated.headers.get('x-request-id'))
    const err = await t.req('GET', '/v1/auth/me', { headers: { 'x-request-id': 'err-1' } })
    expect(err.status).toBe(401)
    expect(err.headers.get('x-request-id')).toBe('err-1')
    const notFound = await t.req('GET', '/nowhere', { headers: { 'x-request-id': 'nf-1' } })
    expect(notFound.headers.get('x-request-id')).toBe('nf-1')
    const hostile = await t.req('GET', '/healthz', { headers: { 'x-request-id': 'a b<script>' } })
    expect(hostile.headers.get('x-request-id')).toMatch(/^req_/)
  })

  test('health and readiness', async () => {
    expect((await t.req('GET', '/healthz')).body).toEqual({ status: 'ok' })
    expect((await t.req('GET', '/readyz')).status).toBe(200)
  })

  test('the OpenAPI document and the docs page are served', async () => {
    const doc = await t.req('GET', '/openapi.json')
    expect(doc.status).toBe(200)
    expect(doc.body.openapi).toStartWith('3.')
    expect(doc.body.info.title).toBe('gridkeep')
    expect(doc.body.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' })
    const docs = await t.req('GET', '/docs')
    expect(docs.status).toBe(200)
    expect(docs.headers.get('content-type')).toContain('text/html')
  })
})
