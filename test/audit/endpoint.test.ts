import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { SYSTEM_AUDIT, signedIn } from '../../src/domain/audit'
import { makeTestApp, startTestServer, type TestApp } from '../helpers/app'
import { auditEntries } from '../helpers/audit'
import {
  type MadeUser,
  makePersonalKey,
  makeSuperadmin,
  makeUser,
  makeWorkerKey,
  setUserFlags,
} from '../helpers/builders'

// docs/api.md §17 GET /v1/audit-events: who reads which entries (a superadmin all; an org's owners
// and admins their org's; anyone else nothing of it), the filters and their 400s, the pages and the
// JSON lines export, and that no route changes an entry.

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
const apps: TestApp[] = [t]
afterAll(() => {
  for (const a of apps) a.close()
})

let admin: MadeUser
let owner: MadeUser
let orgAdmin: MadeUser
let viewer: MadeUser
let stranger: MadeUser
let orgA: string
let orgB: string
let keyA: string

beforeAll(async () => {
  admin = await makeSuperadmin(t)
  owner = await makeUser(t)
  orgAdmin = await makeUser(t)
  viewer = await makeUser(t)
  stranger = await makeUser(t)
  orgA = (await t.req('POST', '/v1/orgs', { token: owner.token, body: { name: 'A' } })).body.id
  orgB = (await t.req('POST', '/v1/orgs', { token: stranger.token, body: { name: 'B' } })).body.id
  for (const [u, role] of [
    [orgAdmin, 'admin'],
    [viewer, 'viewer'],
  ] as const) {
    const res = await t.req('POST', `/v1/orgs/${orgA}/members`, {
      token: owner.token,
      body: { email: u.email, role },
    })
    expect(res.status).toBe(201)
  }
  keyA = (await makeWorkerKey(t, owner, orgA)).id
  await makeWorkerKey(t, stranger, orgB)
})

const list = (who: { token: string }, query = '') =>
  t.req('GET', `/v1/audit-events${query ? `?${query}` : ''}`, { token: who.token })

describe('who reads what', () => {
  test('a superadmin reads every entry, those of no org included', async () => {
    const all = await auditEntries(t, admin)
    const orgs = new Set(all.map((e) => e.org_id))
    expect(orgs.has(orgA)).toBe(true)
    expect(orgs.has(orgB)).toBe(true)
    expect(orgs.has(null)).toBe(true)
  })

  test("an org's owners and admins read its entries, and only entries of orgs they own or administer", async () => {
    for (const reader of [owner, orgAdmin]) {
      const mine = await auditEntries(t, reader, { org_id: orgA })
      expect(mine.map((e) => e.action).sort()).toEqual(
        ['key.worker.created', 'org.created', 'org.member.added', 'org.member.added'].sort(),
      )
      expect(mine.find((e) => e.action === 'key.worker.created')?.target.id).toBe(keyA)
      const visible = await auditEntries(t, reader)
      // Without org_id: their orgs' entries (orgA; the owner's personal org has none), never org B's
      // nor those of no org (sign-ins, personal keys).
      expect(visible.every((e) => e.org_id === orgA)).toBe(true)
      expect(visible).toHaveLength(mine.length)
    }
  })

  test("another org's entries are invisible: a 404 when named, absent otherwise; a viewer gets a 403", async () => {
    const named = await list(owner, `org_id=${orgB}`)
    expect([named.status, named.body.error.code]).toEqual([404, 'org_not_found'])
    const unknown = await list(owner, 'org_id=org_nope')
    expect([unknown.status, unknown.body.error.code]).toEqual([404, 'org_not_found'])
    const asViewer = await list(viewer, `org_id=${orgA}`)
    expect([asViewer.status, asViewer.body.error.code]).toEqual([403, 'insufficient_role'])
    // The viewer owns nothing with entries: the unfiltered list is empty.
    expect((await auditEntries(t, viewer)).filter((e) => e.org_id === orgA)).toEqual([])
    expect((await auditEntries(t, stranger)).map((e) => e.org_id)).not.toContain(orgA)
    // An id the caller may not read is no cursor either (docs/api.md §0: existence never leaks).
    const theirs = (await auditEntries(t, admin, { org_id: orgB }))[0]!
    const cursor = await list(owner, `after=${theirs.id}`)
    expect([cursor.status, cursor.body.error.code]).toEqual([400, 'invalid_cursor'])
    // The export answers the same.
    const jsonl = await t.req('GET', '/v1/audit-events?format=jsonl', { token: stranger.token })
    expect(jsonl.text).not.toContain(orgA)
  })

  test('a personal key reads as its user; a pending password change is a 403; a worker key a 401', async () => {
    const k = await makePersonalKey(t, owner)
    const res = await list({ token: k.key }, `org_id=${orgA}`)
    expect(res.status).toBe(200)
    const superKey = await makePersonalKey(t, admin)
    expect((await list({ token: superKey.key }, `org_id=${orgB}`)).status).toBe(200)
    const worker = await makeWorkerKey(t, owner, orgA)
    expect((await list({ token: worker.key })).status).toBe(401)
    const pending = await makeUser(t)
    await setUserFlags(t, pending.id, { must_change_password: true })
    const gated = await list(pending)
    expect([gated.status, gated.body.error.code]).toEqual([403, 'password_change_required'])
  })
})

describe('filters', () => {
  test('by actor: a user (by JWT or personal key), a key, system, anonymous', async () => {
    const byOwner = await auditEntries(t, admin, { actor: owner.id })
    expect(byOwner.length).toBeGreaterThan(0)
    expect(byOwner.every((e) => e.actor.user_id === owner.id)).toBe(true)
    const k = await makePersonalKey(t, viewer)
    const rotated = await t.req('POST', '/v1/auth/api-keys/regenerate', {
      token: k.key,
      body: { key_id: k.id },
    })
    expect(rotated.status).toBe(201)
    const byKey = await auditEntries(t, admin, { actor: k.id })
    expect(byKey.map((e) => [e.action, e.actor.kind])).toEqual([['key.personal.regenerated', 'personal_key']])
    const system = await auditEntries(t, admin, { actor: 'system' })
    expect(system.length).toBeGreaterThan(0)
    expect(system.every((e) => e.actor.kind === 'system')).toBe(true)
    const anonymous = await auditEntries(t, admin, { actor: 'anonymous', action: 'user.created' })
    expect(anonymous.map((e) => e.target.id)).toContain(viewer.id)
  })

  test('by action or family, target kind and id, org and time range', async () => {
    const family = await auditEntries(t, admin, { action: 'org.*' })
    expect(new Set(family.map((e) => e.action))).toEqual(new Set(['org.created', 'org.member.added']))
    const exact = await auditEntries(t, admin, { action: 'org.created' })
    expect(exact.map((e) => e.target.id).sort()).toEqual([orgA, orgB].sort())
    const keys = await auditEntries(t, admin, { target_kind: 'key', org_id: orgA })
    expect(keys.every((e) => e.target.kind === 'key' && e.org_id === orgA)).toBe(true)
    expect(keys.map((e) => e.target.id)).toContain(keyA)
    expect(
      (await auditEntries(t, admin, { target_id: viewer.id, target_kind: 'user' })).length,
    ).toBeGreaterThan(0)

    t.clock.advance(100)
    const from = t.clock.now()
    const late = await makeUser(t)
    t.clock.advance(100)
    const window = await auditEntries(t, admin, { start: String(from), end: String(from + 1) })
    expect(new Set(window.map((e) => e.target.id))).toEqual(new Set([late.id]))
    expect(window.every((e) => e.created_at === from)).toBe(true)
    expect(await auditEntries(t, admin, { start: String(t.clock.now()) })).toEqual([])
    expect((await auditEntries(t, admin, { end: String(from) })).some((e) => e.target.id === late.id)).toBe(
      false,
    )
  })

  test('a bad filter is a 400 naming its parameter', async () => {
    const cases: [string, string][] = [
      ['actor=bob', 'actor'],
      ['action=nope', 'action'],
      ['action=nope.*', 'action'],
      ['target_kind=batch', 'target_kind'],
      ['start=yesterday', 'start'],
      ['end=-1', 'end'],
      ['start=20&end=10', 'start'],
      ['format=xml', 'format'],
      ['format=jsonl&limit=5', 'limit'],
      ['limit=0', 'limit'],
      ['limit=101', 'limit'],
    ]
    for (const [query, param] of cases) {
      const res = await list(admin, query)
      expect([query, res.status, res.body.error?.param]).toEqual([query, 400, param])
      expect(res.body.error.type).toBe('invalid_request_error')
    }
    const unknownParam = await list(admin, 'who=me')
    expect(unknownParam.status).toBe(400)
    const cursor = await list(admin, 'after=aud_nope')
    expect([cursor.status, cursor.body.error.code]).toEqual([400, 'invalid_cursor'])
  })
})

describe('pages and the export', () => {
  const many = makeTestApp()
  apps.push(many)
  let reader: MadeUser
  const extra = 230

  beforeAll(async () => {
    reader = await makeSuperadmin(many)
    const now = many.clock.now()
    for (let i = 0; i < extra; i++)
      await many.deps.store.audit.record(SYSTEM_AUDIT, [signedIn({ id: `user_${i}` }, 'password')], now)
  })

  test('paged newest first with limit and after, no entry twice', async () => {
    const first = await many.req('GET', '/v1/audit-events?limit=7', { token: reader.token })
    expect(first.body).toMatchObject({ object: 'list', has_more: true })
    expect(first.body.data).toHaveLength(7)
    expect(first.body.data[0].target.id).toBe(`user_${extra - 1}`)
    const all = await auditEntries(many, reader)
    expect(new Set(all.map((e) => e.id)).size).toBe(all.length)
    expect(all.length).toBeGreaterThan(extra)
    expect(all.slice(0, 7).map((e) => e.id)).toEqual(first.body.data.map((e: { id: string }) => e.id))
  })

  test('JSON lines: every matching entry across the pages, by ?format=jsonl or the Accept header', async () => {
    const all = await auditEntries(many, reader)
    for (const opts of [
      { path: '/v1/audit-events?format=jsonl', headers: {} as Record<string, string> },
      { path: '/v1/audit-events', headers: { accept: 'application/x-ndjson' } },
    ]) {
      const res = await many.req('GET', opts.path, { token: reader.token, headers: opts.headers })
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('application/x-ndjson')
      expect(res.headers.get('x-request-id')).toBeTruthy()
      const lines = res.text.split('\n')
      expect(lines.pop()).toBe('')
      expect(lines.map((l) => JSON.parse(l))).toEqual(all)
    }
    const filtered = await many.req(
      'GET',
      '/v1/audit-events?format=jsonl&actor=system&action=auth.signed_in',
      {
        token: reader.token,
      },
    )
    expect(filtered.text.trim().split('\n')).toHaveLength(extra)
    const tail = await many.req('GET', `/v1/audit-events?format=jsonl&after=${all.at(-3)!.id}`, {
      token: reader.token,
    })
    expect(
      tail.text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).id),
    ).toEqual(all.slice(-2).map((e) => e.id))
    // format=json keeps the list even with the Accept header.
    const json = await many.req('GET', '/v1/audit-events?format=json&limit=1', {
      token: reader.token,
      headers: { accept: 'application/x-ndjson' },
    })
    expect(json.body.object).toBe('list')
  })
})

test('append-only: GET is the only route of /v1/audit-events, and the OpenAPI document describes it', async () => {
  const routes = t.app.routes.filter((r) => r.path.startsWith('/v1/audit-events'))
  expect(routes.map((r) => `${r.method} ${r.path}`)).toEqual(['GET /v1/audit-events'])
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
    const res = await t.req(method, '/v1/audit-events', { token: admin.token })
    expect([method, res.status]).toEqual([method, 404])
  }
  const doc = (await t.req('GET', '/openapi.json')).body
  const op = doc.paths['/v1/audit-events'].get
  expect(op['x-gridkeep-auth']).toBe('user')
  const params = op.parameters.map((p: { name: string }) => p.name)
  for (const name of [
    'actor',
    'action',
    'target_kind',
    'target_id',
    'org_id',
    'start',
    'end',
    'limit',
    'after',
    'format',
  ])
    expect(params).toContain(name)
})

test('over HTTP the entry carries the client address and user agent', async () => {
  const s = await startTestServer()
  try {
    const u = await makeUser(s)
    const res = await s.req('POST', '/v1/auth/login', {
      headers: { 'user-agent': 'curl/8.0' },
      body: { email: u.email, password: u.password },
    })
    expect(res.status).toBe(200)
    const reader = await makeSuperadmin(s)
    const [entry] = await auditEntries(s, reader, { action: 'auth.signed_in', target_id: u.id })
    expect(entry).toMatchObject({ ip: '127.0.0.1', user_agent: 'curl/8.0' })
  } finally {
    await s.stop()
  }
})
