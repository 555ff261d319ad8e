import { afterAll, expect, test } from 'bun:test'
import { STREAMING_UPLOAD_ROUTES } from '../../src/http/parse'
import { makeTestApp, startTestServer } from '../helpers/app'
import { uploadForm } from '../helpers/batches'
import { makePersonalKey, makeUser } from '../helpers/builders'
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
