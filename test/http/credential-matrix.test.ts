import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { AUTH_LEVELS, type AuthLevel } from '../../src/http/auth'
import { makeTestApp } from '../helpers/app'
import { type MadeUser, makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'
import { expiredJwt, foreignJwt, unsignedJwt } from '../helpers/tokens'

// docs/api.md §1: which credential each path accepts. This walks EVERY route the app serves, so a route
// added later is held to its declared level automatically. Accepted credentials must get past auth
// (any status but 401); everything else gets a 401 in the envelope — before body validation.

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
afterAll(() => t.close())

let user: MadeUser
let admin: MadeUser
const creds: Record<string, string> = {}

beforeAll(async () => {
  user = await makeUser(t)
  admin = await makeSuperadmin(t)
  creds.jwt = user.token
  creds.adminJwt = admin.token
  creds.personal = (await makePersonalKey(t, user)).key
  creds.worker = (await makeWorkerKey(t, user, user.personalOrgId)).key
  const revoked = await makePersonalKey(t, user)
  expect((await t.req('DELETE', `/v1/users/me/api-keys/${revoked.id}`, { token: user.token })).status).toBe(
    200,
  )
  creds.revokedKey = revoked.key
  const revokedWorker = await makeWorkerKey(t, user, user.personalOrgId)
  await t.req('DELETE', `/v1/orgs/${user.personalOrgId}/api-keys/${revokedWorker.id}`, { token: user.token })
  creds.revokedWorkerKey = revokedWorker.key
  creds.expiredKey = (await makePersonalKey(t, user, { expires_at: t.clock.now() + 60 })).key
  creds.expiredJwt = await expiredJwt(t, user.id)
  creds.foreignJwt = await foreignJwt(t, user.id)
  creds.noneJwt = unsignedJwt(user.id, t.clock.now() + 3600)
  // Let the short-lived key expire; the other credentials stay valid (JWT TTL is a day).
  t.clock.advance(120)
})

const routes = () =>
  t.app.routes
    .filter((r) => !['/docs', '/openapi.json'].includes(r.path))
    .map((r) => ({
      method: r.method,
      path: r.path,
      level: (r.hooks as any).detail?.['x-gridkeep-auth'] as AuthLevel,
    }))

/** A request that passes auth but changes nothing: unknown ids, a body no schema accepts. */
async function probe(route: { method: string; path: string }, authorization?: string) {
  const path = route.path.replace(':org_id', user.personalOrgId).replace(/:[a-z_]+/g, 'unknown_id')
  const headers: Record<string, string> = authorization ? { authorization } : {}
  const hasBody = ['POST', 'PUT', 'PATCH'].includes(route.method)
  return t.req(route.method, path, { headers, ...(hasBody ? { body: { __probe: true } } : {}) })
}

test('every route declares exactly one known auth level', () => {
  const list = routes()
  expect(list.length).toBeGreaterThan(20)
  for (const r of list)
    expect([`${r.method} ${r.path}`, AUTH_LEVELS.includes(r.level)]).toEqual([`${r.method} ${r.path}`, true])
})

test('the OpenAPI document states the auth of every operation', async () => {
  const doc = (await t.req('GET', '/openapi.json')).body
  // Routes hidden from the document are not API operations (the dashboard page and its assets).
  const hidden = new Set(t.app.routes.filter((r) => (r.hooks as any).detail?.hide).map((r) => r.path))
  for (const r of routes().filter((r) => !hidden.has(r.path))) {
    const path = r.path.replace(/:([a-z_]+)/g, '{$1}')
    const op = doc.paths[path]?.[r.method.toLowerCase()]
    expect(op?.['x-gridkeep-auth']).toBe(r.level)
    expect(op?.description).toStartWith('Auth: ')
  }
})

// Which credentials each level admits (docs/api.md §1). "adminJwt" only matters for superadmin routes.
const ACCEPTS: Record<AuthLevel, string[]> = {
  public: ['none', 'jwt', 'personal', 'worker'],
  session: ['jwt'],
  jwt: ['jwt'],
  user: ['jwt', 'personal'],
  // A personal key gets past auth here; naming another key than itself is then a 403 (docs/api.md §3).
  self: ['jwt', 'personal'],
  superadmin: ['adminJwt'],
  worker: ['worker'],
  optional: ['none', 'jwt', 'personal', 'worker'],
  reader: ['jwt', 'personal', 'worker'],
}

describe('valid credentials of each type', () => {
  for (const kind of ['none', 'jwt', 'personal', 'worker', 'adminJwt']) {
    test(`${kind}: accepted exactly where docs/api.md §1 says, 401 elsewhere`, async () => {
      for (const r of routes()) {
        const res = await probe(r, kind === 'none' ? undefined : `Bearer ${creds[kind]}`)
        const accepted =
          ACCEPTS[r.level].includes(kind) || (kind === 'adminJwt' && ACCEPTS[r.level].includes('jwt'))
        const name = `${kind} ${r.method} ${r.path} (${r.level})`
        if (accepted) expect([name, res.status]).not.toEqual([name, 401])
        else if (kind === 'jwt' && r.level === 'superadmin') {
          // Authenticated but not allowed: 403, not 401.
          expect([name, res.status, res.body.error?.code]).toEqual([name, 403, 'superadmin_required'])
        } else {
          expect([name, res.status, res.body.error?.type]).toEqual([name, 401, 'authentication_error'])
        }
      }
    })
  }
})

const INVALID: [string, () => string][] = [
  ['garbage bearer', () => 'Bearer garbage-token'],
  ['malformed header', () => `Basic ${Buffer.from('a:b').toString('base64')}`],
  ['bearer without token', () => 'Bearer '],
  ['expired JWT', () => `Bearer ${creds.expiredJwt}`],
  ['JWT signed with another secret', () => `Bearer ${creds.foreignJwt}`],
  ['alg: none JWT', () => `Bearer ${creds.noneJwt}`],
  ['revoked personal key', () => `Bearer ${creds.revokedKey}`],
  ['revoked worker key', () => `Bearer ${creds.revokedWorkerKey}`],
  ['expired personal key', () => `Bearer ${creds.expiredKey}`],
  ['unknown well-formed key', () => `Bearer gk-${'A'.repeat(40)}`],
]

describe('invalid credentials are a 401 on every protected route', () => {
  for (const [name, header] of INVALID) {
    test(name, async () => {
      for (const r of routes().filter((x) => x.level !== 'public')) {
        const res = await probe(r, header())
        expect([`${r.method} ${r.path}`, res.status, res.body.error?.type]).toEqual([
          `${r.method} ${r.path}`,
          401,
          'authentication_error',
        ])
      }
    })
  }
})

test('auth is checked before the body: a bad body without credentials is a 401, not a 400', async () => {
  const res = await t.req('POST', '/v1/users/me/api-keys', { body: { name: 5, extra: true } })
  expect(res.status).toBe(401)
})

test('public routes ignore every invalid credential (resolved before routing, the failure is kept, not thrown)', async () => {
  for (const [name, header] of INVALID) {
    for (const r of routes().filter((x) => x.level === 'public')) {
      const res = await probe(r, header())
      expect([name, `${r.method} ${r.path}`, res.status]).not.toEqual([name, `${r.method} ${r.path}`, 401])
    }
  }
})

test('public routes ignore a garbage Authorization header', async () => {
  const res = await t.req('POST', '/v1/auth/login', {
    headers: { authorization: 'Bearer garbage' },
    body: { email: user.email, password: user.password },
  })
  expect(res.status).toBe(200)
})

test('a personal key works where keys are accepted', async () => {
  const res = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: creds.personal, body: {} })
  expect(res.status).toBe(201)
  expect(res.body.key).toMatch(/^gk-[0-9A-Za-z]{40}$/)
})
