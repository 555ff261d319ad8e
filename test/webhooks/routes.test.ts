import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'

// docs/api.md §13: POST/GET/DELETE /v1/webhooks and the delivery log, with JWT or personal key; a user
// sees only their own; the secret is shown once; bad URLs are 400 invalid_url.

const t = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'false' })
afterAll(() => t.close())
// A name on the public internet for this test (no DNS is asked): 192.0.2/24 style ranges are
// refused, so a global unicast address stands for it.
const PUBLIC = '93.184.215.14'
t.deps.resolveHost = async (host) => {
  if (host === 'hooks.example.test') return [PUBLIC]
  if (host === 'split.example.test') return [PUBLIC, '10.0.0.7']
  if (host === 'localhost') return ['127.0.0.1', '::1']
  throw new Error('ENOTFOUND')
}

const create = (token: string, body: unknown) => t.req('POST', '/v1/webhooks', { token, body })

describe('webhooks', () => {
  test('create with a JWT or a personal key: the secret once, then never again', async () => {
    const user = await makeUser(t)
    const res = await create(user.token, { url: 'https://hooks.example.test/gridkeep?x=1' })
    expect(res.status).toBe(200)
    expect(res.body).toMatchObject({
      object: 'webhook',
      url: 'https://hooks.example.test/gridkeep?x=1',
      events: ['batch.validated', 'batch.completed', 'batch.failed'],
      created_at: t.clock.now(),
    })
    expect(res.body.id).toMatch(/^wh_/)
    expect(res.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]+$/)
    expect(Buffer.from(res.body.secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24)

    const { key } = await makePersonalKey(t, user)
    const byKey = await create(key, { url: 'http://hooks.example.test/failed', events: ['batch.failed'] })
    expect(byKey.status).toBe(200)
    expect(byKey.body.events).toEqual(['batch.failed'])
    expect(byKey.body.secret).not.toBe(res.body.secret)

    const list = await t.req('GET', '/v1/webhooks', { token: key })
    expect(list.status).toBe(200)
    expect(list.body.data.map((w: { id: string }) => w.id)).toEqual([byKey.body.id, res.body.id])
    const one = await t.req('GET', `/v1/webhooks/${res.body.id}`, { token: user.token })
    expect(one.status).toBe(200)
    for (const body of [list.text, one.text]) expect(body).not.toContain('whsec_')

    const page = await t.req('GET', '/v1/webhooks?limit=1', { token: user.token })
    expect(page.body).toMatchObject({ has_more: true, first_id: byKey.body.id, last_id: byKey.body.id })
    const next = await t.req('GET', `/v1/webhooks?limit=1&after=${byKey.body.id}`, { token: user.token })
    expect(next.body).toMatchObject({ has_more: false, data: [{ id: res.body.id }] })
  })

  test('a worker key is refused (401)', async () => {
    const user = await makeUser(t)
    const { key } = await makeWorkerKey(t, user, user.personalOrgId)
    expect((await create(key, { url: 'http://hooks.example.test/' })).status).toBe(401)
    expect((await t.req('GET', '/v1/webhooks', { token: key })).status).toBe(401)
  })

  test('another user’s webhook is a 404 to read, delete or list deliveries of', async () => {
    const owner = await makeUser(t)
    const other = await makeUser(t)
    const hook = (await create(owner.token, { url: 'http://hooks.example.test/' })).body.id
    for (const [method, path] of [
      ['GET', `/v1/webhooks/${hook}`],
      ['DELETE', `/v1/webhooks/${hook}`],
      ['GET', `/v1/webhooks/${hook}/deliveries`],
    ] as const) {
      const res = await t.req(method, path, { token: other.token })
      expect(res.status).toBe(404)
      expect(res.body.error.code).toBe('webhook_not_found')
    }
    expect((await t.req('GET', '/v1/webhooks', { token: other.token })).body.data).toEqual([])
    const deleted = await t.req('DELETE', `/v1/webhooks/${hook}`, { token: owner.token })
    expect(deleted.status).toBe(200)
    expect(deleted.body).toEqual({ id: hook, object: 'webhook', deleted: true })
    expect((await t.req('DELETE', `/v1/webhooks/${hook}`, { token: owner.token })).status).toBe(404)
    expect((await t.req('GET', `/v1/webhooks/${hook}/deliveries`, { token: owner.token })).status).toBe(404)
  })

  test('bad URLs: not http(s), too long, not a URL → 400 invalid_url', async () => {
    const user = await makeUser(t)
    const long = `https://hooks.example.test/${'a'.repeat(2049 - 'https://hooks.example.test/'.length)}`
    expect(long.length).toBe(2049)
    for (const url of [
      'ftp://hooks.example.test/x',
      'javascript:alert(1)',
      'file:///etc/passwd',
      'hooks.example.test',
      long,
    ]) {
      const res = await create(user.token, { url })
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({
        code: 'invalid_url',
        param: 'url',
        type: 'invalid_request_error',
      })
    }
    // 2,048 characters is still accepted.
    expect((await create(user.token, { url: long.slice(0, 2048) })).status).toBe(200)
  })

  test('private, loopback, link-local and metadata hosts are refused unless WEBHOOK_ALLOW_PRIVATE', async () => {
    const user = await makeUser(t)
    for (const url of [
      'http://127.0.0.1:8080/',
      'http://localhost/',
      'http://[::1]/',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fd00:ec2::254]/',
      'http://10.1.2.3/',
      'http://192.168.1.1/',
      'http://172.16.0.1/',
      'http://[fe80::1]/',
      'http://[::ffff:127.0.0.1]/',
      'http://0.0.0.0/',
      // Any of its addresses refused refuses the name.
      'http://split.example.test/',
      // A name that does not resolve cannot be checked.
      'http://nowhere.example.test/',
    ]) {
      const res = await create(user.token, { url })
      expect({ url, status: res.status, code: res.body.error?.code }).toEqual({
        url,
        status: 400,
        code: 'invalid_url',
      })
    }
    const open = makeTestApp({ WEBHOOK_ALLOW_PRIVATE: 'true' })
    try {
      const lan = await makeUser(open)
      for (const url of ['http://127.0.0.1:8080/', 'http://169.254.169.254/', 'http://[fd00:ec2::254]/'])
        expect((await open.req('POST', '/v1/webhooks', { token: lan.token, body: { url } })).status).toBe(200)
    } finally {
      open.close()
    }
  })

  test('bad bodies: unknown event, empty or repeated events, unknown fields, missing url → 400', async () => {
    const user = await makeUser(t)
    for (const body of [
      { url: 'http://hooks.example.test/', events: ['batch.created'] },
      { url: 'http://hooks.example.test/', events: [] },
      { url: 'http://hooks.example.test/', events: ['batch.failed', 'batch.failed'] },
      { url: 'http://hooks.example.test/', secret: 'whsec_mine' },
      { events: ['batch.failed'] },
      { url: 42 },
    ]) {
      const res = await create(user.token, body)
      expect(res.status).toBe(400)
      expect(res.body.error.type).toBe('invalid_request_error')
    }
    expect((await t.req('GET', '/v1/webhooks?limit=0', { token: user.token })).status).toBe(400)
    expect((await t.req('GET', '/v1/webhooks?after=wh_nope', { token: user.token })).status).toBe(400)
  })
})
