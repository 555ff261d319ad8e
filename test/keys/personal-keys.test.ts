import { afterAll, describe, expect, test } from 'bun:test'
import { sha256Hex } from '../../src/lib/keys'
import { makeTestApp } from '../helpers/app'
import { makePersonalKey, makeUser, makeWorkerKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
afterAll(() => t.close())

const base = '/v1/users/me/api-keys'

describe('personal API keys', () => {
  test('create returns the raw key once; storage holds only its SHA-256; listings show the prefix', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', base, { token: u.token, body: { name: 'laptop' } })
    expect(res.status).toBe(201)
    const raw = res.body.key as string
    expect(raw).toMatch(/^gk-[0-9A-Za-z]{40}$/)
    expect(res.body).toMatchObject({
      object: 'api_key',
      key_type: 'personal',
      name: 'laptop',
      prefix: raw.slice(0, 12),
      user_id: u.id,
      org_id: null,
      expires_at: null,
      revoked_at: null,
      last_used_at: null,
      created_at: t.clock.now(),
    })
    const row = (await t.deps.store.keys.findKey({ type: 'personal', userId: u.id }, res.body.id))!
    expect(row.key_hash).toBe(sha256Hex(raw))
    const { db, tables } = rowsOf(t.deps)
    expect(JSON.stringify(await db.select().from(tables.apiKeys))).not.toContain(raw)
    const list = await t.req('GET', base, { token: u.token })
    expect(list.status).toBe(200)
    expect(list.body).toMatchObject({
      object: 'list',
      has_more: false,
      first_id: res.body.id,
      last_id: res.body.id,
    })
    expect(list.body.data).toHaveLength(1)
    expect(list.body.data[0].key).toBeUndefined()
    expect(list.body.data[0].prefix).toBe(raw.slice(0, 12))
    const one = await t.req('GET', `${base}/${res.body.id}`, { token: u.token })
    expect(one.body.key).toBeUndefined()
  })

  test('the key authenticates and records last_used_at', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    expect(
      (await t.req('POST', '/v1/auth/api-keys/regenerate', { token: k.key, body: { key_id: k.id } })).status,
    ).toBe(201)
    const row = (await t.deps.store.keys.findKey({ type: 'personal', userId: u.id }, k.id))!
    expect(row.last_used_at).toBe(t.clock.now())
  })

  test('list is newest first and paginates with limit/after', async () => {
    const u = await makeUser(t)
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push((await makePersonalKey(t, u, { name: `k${i}` })).id)
    const page1 = await t.req('GET', `${base}?limit=2`, { token: u.token })
    expect(page1.body.data.map((k: any) => k.id)).toEqual([ids[4], ids[3]])
    expect(page1.body.has_more).toBe(true)
    const page2 = await t.req('GET', `${base}?limit=2&after=${page1.body.last_id}`, { token: u.token })
    expect(page2.body.data.map((k: any) => k.id)).toEqual([ids[2], ids[1]])
    const page3 = await t.req('GET', `${base}?limit=2&after=${page2.body.last_id}`, { token: u.token })
    expect(page3.body.data.map((k: any) => k.id)).toEqual([ids[0]])
    expect(page3.body.has_more).toBe(false)
    for (const bad of ['limit=0', 'limit=101', 'limit=abc']) {
      const res = await t.req('GET', `${base}?${bad}`, { token: u.token })
      expect(res.status).toBe(400)
      expect(res.body.error.param).toBe('limit')
    }
    const other = await makeUser(t)
    // Another user's id is no cursor for me: it does not leak that it exists.
    const res = await t.req('GET', `${base}?after=${ids[0]}`, { token: other.token })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('invalid_cursor')
  })

  test('PUT renames, sets or clears expiry, and revokes', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    const later = t.clock.now() + 3600
    const renamed = await t.req('PUT', `${base}/${k.id}`, {
      token: u.token,
      body: { name: 'ci', expires_at: later },
    })
    expect(renamed.status).toBe(200)
    expect(renamed.body).toMatchObject({ name: 'ci', expires_at: later, revoked_at: null })
    const cleared = await t.req('PUT', `${base}/${k.id}`, { token: u.token, body: { expires_at: null } })
    expect(cleared.body.expires_at).toBeNull()
    const past = await t.req('PUT', `${base}/${k.id}`, {
      token: u.token,
      body: { expires_at: t.clock.now() - 1 },
    })
    expect(past.status).toBe(400)
    expect(past.body.error).toMatchObject({ code: 'invalid_expiry', param: 'expires_at' })
    const revoked = await t.req('PUT', `${base}/${k.id}`, { token: u.token, body: { revoked: true } })
    expect(revoked.body.revoked_at).toBe(t.clock.now())
    expect((await t.req('POST', '/v1/auth/api-keys/regenerate', { token: k.key })).status).toBe(401)
    const bad = await t.req('PUT', `${base}/${k.id}`, { token: u.token, body: { revoked: false } })
    expect(bad.status).toBe(400)
  })

  test('an expiry in the past is refused at creation; an expired key stops working', async () => {
    const u = await makeUser(t)
    const past = await t.req('POST', base, { token: u.token, body: { expires_at: t.clock.now() } })
    expect(past.status).toBe(400)
    const k = await makePersonalKey(t, u, { expires_at: t.clock.now() + 10 })
    expect(
      (await t.req('POST', '/v1/auth/api-keys/regenerate', { token: k.key, body: { key_id: 'key_nope' } }))
        .status,
    ).toBe(404)
    t.clock.advance(10)
    const res = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: k.key })
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('api_key_expired')
  })

  test('DELETE revokes with effect on the very next request, idempotently', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(200)
    const del = await t.req('DELETE', `${base}/${k.id}`, { token: u.token })
    expect(del.status).toBe(200)
    expect(del.body.revoked_at).toBe(t.clock.now())
    const res = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: k.key })
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('api_key_revoked')
    t.clock.advance(5)
    const again = await t.req('DELETE', `${base}/${k.id}`, { token: u.token })
    expect(again.status).toBe(200)
    expect(again.body.revoked_at).toBe(del.body.revoked_at)
  })

  test("another user's key is a 404 for every verb", async () => {
    const owner = await makeUser(t)
    const k = await makePersonalKey(t, owner)
    const other = await makeUser(t)
    for (const [method, body] of [
      ['GET', undefined],
      ['PUT', { name: 'mine' }],
      ['DELETE', undefined],
    ] as const) {
      const res = await t.req(method, `${base}/${k.id}`, { token: other.token, body })
      expect(res.status).toBe(404)
      expect(res.body.error.type).toBe('not_found_error')
    }
    expect(
      (await t.req('POST', '/v1/auth/api-keys/regenerate', { token: other.token, body: { key_id: k.id } }))
        .status,
    ).toBe(404)
    // Untouched.
    expect((await t.req('GET', `${base}/${k.id}`, { token: owner.token })).body).toMatchObject({
      name: 'default',
      revoked_at: null,
    })
  })
})

describe('(ext) a personal key revokes itself: DELETE /v1/users/me/api-keys/{its own id}', () => {
  test('200 with revoked_at, then the key is a 401 api_key_revoked, on this route too', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u, { name: 'gridkeep-cli@laptop' })
    const other = await makePersonalKey(t, u)
    expect((await t.req('GET', '/v1/models', { token: k.key })).status).toBe(200)
    const del = await t.req('DELETE', `${base}/${k.id}`, { token: k.key })
    expect(del.status).toBe(200)
    expect(del.body).toMatchObject({ id: k.id, name: 'gridkeep-cli@laptop', revoked_at: t.clock.now() })
    expect(del.body.key).toBeUndefined()
    const models = await t.req('GET', '/v1/models', { token: k.key })
    expect(models.status).toBe(401)
    expect(models.body.error.code).toBe('api_key_revoked')
    const again = await t.req('DELETE', `${base}/${k.id}`, { token: k.key })
    expect(again.status).toBe(401)
    expect(again.body.error.code).toBe('api_key_revoked')
    // Only that key: the user's other key and JWT still work.
    expect((await t.req('GET', '/v1/models', { token: other.key })).status).toBe(200)
    expect((await t.req('GET', `${base}/${other.id}`, { token: u.token })).body.revoked_at).toBeNull()
  })

  test("any other id is a 403 own_key_only, existing or not, mine or another user's; nothing changes", async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    const sibling = await makePersonalKey(t, u)
    const stranger = await makeUser(t)
    const foreign = await makePersonalKey(t, stranger)
    for (const id of [sibling.id, foreign.id, 'key_does_not_exist']) {
      const res = await t.req('DELETE', `${base}/${id}`, { token: k.key })
      expect([id, res.status, res.body.error]).toEqual([
        id,
        403,
        expect.objectContaining({ type: 'permission_error', code: 'own_key_only' }),
      ])
    }
    for (const [owner, key] of [
      [u, sibling],
      [stranger, foreign],
    ] as const)
      expect((await t.req('GET', `${base}/${key.id}`, { token: owner.token })).body.revoked_at).toBeNull()
    expect((await t.req('GET', '/v1/models', { token: k.key })).status).toBe(200)
  })

  test('only DELETE: the other key routes stay JWT only (401 for a key), and a worker key is a 401', async () => {
    const u = await makeUser(t)
    const k = await makePersonalKey(t, u)
    for (const [method, path, body] of [
      ['GET', base, undefined],
      ['POST', base, { name: 'more' }],
      ['GET', `${base}/${k.id}`, undefined],
      ['PUT', `${base}/${k.id}`, { revoked: true }],
    ] as const) {
      const res = await t.req(method, path, { token: k.key, body })
      expect([method, path, res.status]).toEqual([method, path, 401])
    }
    const worker = await makeWorkerKey(t, u, u.personalOrgId)
    const res = await t.req('DELETE', `${base}/${worker.id}`, { token: worker.key })
    expect(res.status).toBe(401)
    expect(res.body.error.code).toBe('wrong_credential_type')
    expect((await t.req('DELETE', `${base}/${k.id}`, {})).status).toBe(401)
    // With a JWT, an unknown id is still the 404 of docs/api.md §3.
    const missing = await t.req('DELETE', `${base}/key_does_not_exist`, { token: u.token })
    expect(missing.status).toBe(404)
    expect(missing.body.error.code).toBe('api_key_not_found')
  })
})

describe('POST /v1/auth/api-keys/regenerate', () => {
  test('with key_id: that key is revoked and replaced with the same name and expiry', async () => {
    const u = await makeUser(t)
    const expiry = t.clock.now() + 7200
    const old = await makePersonalKey(t, u, { name: 'cron', expires_at: expiry })
    const keep = await makePersonalKey(t, u, { name: 'other' })
    const res = await t.req('POST', '/v1/auth/api-keys/regenerate', {
      token: u.token,
      body: { key_id: old.id },
    })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ name: 'cron', expires_at: expiry, key_type: 'personal' })
    expect(res.body.key).not.toBe(old.key)
    expect((await t.req('GET', `${base}/${old.id}`, { token: u.token })).body.revoked_at).not.toBeNull()
    expect((await t.req('GET', `${base}/${keep.id}`, { token: u.token })).body.revoked_at).toBeNull()
    expect((await t.req('GET', '/v1/models', { token: res.body.key })).status).not.toBe(401)
    const again = await t.req('POST', '/v1/auth/api-keys/regenerate', {
      token: u.token,
      body: { key_id: old.id },
    })
    expect(again.status).toBe(400)
    expect(again.body.error.code).toBe('api_key_revoked')
  })

  test('without key_id: every active personal key is revoked and one named default issued', async () => {
    const u = await makeUser(t)
    const a = await makePersonalKey(t, u, { name: 'a' })
    const b = await makePersonalKey(t, u, { name: 'b' })
    const res = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: a.key })
    expect(res.status).toBe(201)
    expect(res.body.name).toBe('default')
    for (const k of [a, b])
      expect((await t.req('GET', `${base}/${k.id}`, { token: u.token })).body.revoked_at).not.toBeNull()
    const list = await t.req('GET', base, { token: u.token })
    expect(list.body.data.filter((k: any) => k.revoked_at === null).map((k: any) => k.id)).toEqual([
      res.body.id,
    ])
  })

  test('an unknown body field is a 400', async () => {
    const u = await makeUser(t)
    const res = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: u.token, body: { key: 'x' } })
    expect(res.status).toBe(400)
  })
})

test('key creation is rate limited per caller with 429 and Retry-After', async () => {
  const limited = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '2' })
  const u = await makeUser(limited)
  expect((await limited.req('POST', base, { token: u.token, body: {} })).status).toBe(201)
  expect(
    (await limited.req('POST', `/v1/orgs/${u.personalOrgId}/api-keys`, { token: u.token, body: {} })).status,
  ).toBe(201)
  const res = await limited.req('POST', base, { token: u.token, body: {} })
  expect(res.status).toBe(429)
  expect(res.body.error.type).toBe('rate_limit_error')
  expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0)
  expect((await limited.req('POST', '/v1/auth/api-keys/regenerate', { token: u.token })).status).toBe(429)
  const other = await makeUser(limited)
  expect((await limited.req('POST', base, { token: other.token, body: {} })).status).toBe(201)
  limited.clock.advance(60)
  expect((await limited.req('POST', base, { token: u.token, body: {} })).status).toBe(201)
  limited.close()
})
