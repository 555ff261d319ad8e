import { afterAll, describe, expect, test } from 'bun:test'
import { STREAMING_UPLOAD_ROUTES } from '../../src/http/parse'
import { makeTestApp, startTestServer } from '../helpers/app'
import { uploadForm } from '../helpers/batches'
import { makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { rememberSecret } from '../helpers/secrets'

// The body policy of src/http/parse.ts, route by route and over a real connection.

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
afterAll(() => t.close())

const parserOf = (r: { hooks: unknown }) =>
  ((r.hooks as any).parse ?? []).map((p: any) => (typeof p.fn === 'string' ? p.fn : p.fn?.name))

test('every route with a body schema declares its parser; only the upload routes stream', () => {
  for (const r of t.app.routes) {
    const name = `${r.method} ${r.path}`
    const schema = (r.hooks as any).body
    if (STREAMING_UPLOAD_ROUTES.has(name)) {
      expect([name, parserOf(r)]).toEqual([name, ['none']])
    } else if (schema) {
      // Required bodies: Elysia's native JSON parser. Optional ones: ours, which refuses malformed JSON.
      const expected = schema[Symbol.for('TypeBox.Optional')] === 'Optional' ? 'parseOptionalJson' : 'json'
      expect([name, parserOf(r)]).toEqual([name, [expected]])
    }
  }
  const methods = t.app.routes.filter((r) => STREAMING_UPLOAD_ROUTES.has(`${r.method} ${r.path}`))
  expect(methods).toHaveLength(STREAMING_UPLOAD_ROUTES.size)
})

test('a malformed optional body is a 400 and never read as "no body" (regenerate must not rotate every key)', async () => {
  const u = await makeUser(t)
  const a = await makePersonalKey(t, u, { name: 'a' })
  const b = await makePersonalKey(t, u, { name: 'b' })
  const res = await t.req('POST', '/v1/auth/api-keys/regenerate', {
    token: u.token,
    raw: `{"key_id": "${a.id}"`,
    headers: { 'content-type': 'application/json' },
  })
  expect(res.status).toBe(400)
  expect(res.body.error.code).toBe('invalid_json')
  const keys = (await t.req('GET', '/v1/users/me/api-keys', { token: u.token })).body.data
  expect(
    keys
      .filter((k: any) => k.revoked_at === null)
      .map((k: any) => k.id)
      .sort(),
  ).toEqual([a.id, b.id].sort())
  // An empty optional body is no body: rotate every key.
  const empty = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: u.token })
  expect(empty.status).toBe(201)
})

test('over HTTP: a chunked JSON body is 411, a declared length over 4 MiB is 413, both before any read', async () => {
  const server = await startTestServer()
  try {
    const chunked = await fetch(`${server.url}/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode('{"email":"a@b.c","password":"12345678"}'))
          c.close()
        },
      }),
    })
    expect(chunked.status).toBe(411)
    expect(((await chunked.json()) as any).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'length_required',
    })
    const big = await fetch(`${server.url}/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'a@b.c', password: 'x'.repeat(5 * 1024 * 1024) }),
    })
    expect(big.status).toBe(413)
    const form = await fetch(`${server.url}/v1/auth/login`, {
      method: 'POST',
      body: new URLSearchParams({ email: 'a@b.c', password: '12345678' }),
    })
    expect(form.status).toBe(400)
    expect(((await form.json()) as any).error.code).toBe('unsupported_media_type')
    // A body-less POST (Content-Length: 0) is no body at all.
    const u = await makeUser(server)
    const none = await fetch(`${server.url}/v1/auth/api-keys/regenerate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${u.token}` },
    })
    expect(none.status).toBe(201)
    const sent = (await none.json()) as { key: string }
    rememberSecret(sent.key)
    expect(sent.key).toStartWith('gk-')
  } finally {
    await server.stop()
  }
})

test('an upload route reached with a trailing slash still streams its multipart body', async () => {
  const u = await makeUser(t)
  const form = uploadForm('{"custom_id":"a","body":{"model":"m"}}\n', 'in.jsonl')
  const res = await t.req('POST', '/v1/files/', { token: u.token, raw: form })
  expect(res.status).toBe(200)
  expect(res.body).toMatchObject({ object: 'file', purpose: 'batch', filename: 'in.jsonl' })
})

describe('a JSON body that is not an object is a 400 (docs/api.md §0), never read as "no body"', () => {
  // Each of these once reached the handler as if nothing had been sent: the optional-body routes
  // issued or rotated keys, and PUT read them as an empty update.
  const NOT_OBJECTS = ['null', '"a string"', '42', '1e309', 'true', '[]']

  const activeKeys = async (u: { token: string }, orgId: string) => {
    const personal = (await t.req('GET', '/v1/users/me/api-keys', { token: u.token })).body.data
    const worker = (await t.req('GET', `/v1/orgs/${orgId}/api-keys`, { token: u.token })).body.data
    return [...personal, ...worker]
      .filter((k: any) => k.revoked_at === null)
      .map((k: any) => `${k.id}:${k.name}:${k.expires_at}`)
      .sort()
  }

  const routes = (keyId: string, orgId: string): [string, string][] => [
    ['POST', '/v1/users/me/api-keys'],
    ['PUT', `/v1/users/me/api-keys/${keyId}`],
    ['POST', '/v1/auth/api-keys/regenerate'],
    ['POST', `/v1/orgs/${orgId}/api-keys`],
    ['POST', `/v1/orgs/${orgId}/api-keys/regenerate`],
  ]

  test.each(NOT_OBJECTS)('%s → 400 invalid_body on every key route, and no key changes', async (raw) => {
    const u = await makeUser(t)
    const key = await makePersonalKey(t, u, { name: 'kept', expires_at: 1_900_000_000 })
    await makeWorkerKey(t, u, u.personalOrgId)
    const before = await activeKeys(u, u.personalOrgId)
    for (const [method, path] of routes(key.id, u.personalOrgId)) {
      const res = await t.req(method, path, {
        token: u.token,
        raw,
        headers: { 'content-type': 'application/json' },
      })
      expect([method, path, res.status, res.body.error?.code]).toEqual([method, path, 400, 'invalid_body'])
      expect(res.body.error.type).toBe('invalid_request_error')
    }
    expect(await activeKeys(u, u.personalOrgId)).toEqual(before)
  })

  test('an absent body is still allowed where it is optional (and required where it is not)', async () => {
    const u = await makeUser(t)
    const key = await makePersonalKey(t, u)
    for (const [method, path] of routes(key.id, u.personalOrgId)) {
      const res = await t.req(method, path, { token: u.token })
      expect([method, path, res.status]).toEqual([method, path, method === 'PUT' ? 400 : 201])
      if (res.body.key) rememberSecret(res.body.key)
    }
  })

  test('every route with a JSON body schema refuses `null` before authentication', async () => {
    let checked = 0
    for (const r of t.app.routes) {
      if (!(r.hooks as any).body || STREAMING_UPLOAD_ROUTES.has(`${r.method} ${r.path}`)) continue
      const path = r.path.replace(/:(\w+)/g, 'x_$1')
      const res = await t.req(r.method, path, {
        raw: 'null',
        headers: { 'content-type': 'application/json' },
      })
      expect([r.method, r.path, res.status, res.body.error?.code]).toEqual([
        r.method,
        r.path,
        400,
        'invalid_body',
      ])
      checked++
    }
    expect(checked).toBeGreaterThan(15)
  })
})
