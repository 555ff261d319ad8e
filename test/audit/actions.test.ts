import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { AuditActor } from '../../src/domain/audit'
import { ensureSuperadmin } from '../../src/modules/auth/service'
import { runOnce as retentionPass } from '../../src/services/retention'
import { makeTestApp, type TestApp } from '../helpers/app'
import { auditEntries, oneEntry } from '../helpers/audit'
import { makeBatch, makeFile, uploadForm } from '../helpers/batches'
import {
  type MadeUser,
  makePersonalKey,
  makeSuperadmin,
  makeUser,
  makeWorkerKey,
  newPassword,
  uniqueEmail,
} from '../helpers/builders'
import { makeCatalogEntry } from '../helpers/catalogue'
import { rememberSecret } from '../helpers/secrets'
import { until } from '../helpers/until'

// docs/api.md §17: every security-relevant action, performed through the API, leaves exactly one
// entry with the right actor, target and details, and a change that fails leaves none. The last
// test reads every entry this file made and looks for every secret it used.

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0', RATE_LIMIT_LOGIN_PER_MINUTE: '3' })
const apps: TestApp[] = [t]
afterAll(() => {
  for (const a of apps) a.close()
})

const UA = 'gridkeep-audit-test/1.0'
const headers = { 'user-agent': UA }
/** Every secret this file handles: no entry may hold one. */
const secrets: string[] = []
const keep = <T extends string>(s: T): T => {
  secrets.push(s)
  rememberSecret(s)
  return s
}

let admin: MadeUser
beforeAll(async () => {
  admin = await makeSuperadmin(t)
  keep(admin.password)
  keep(admin.token)
})

/** A user made through signup and login, their secrets kept. */
async function user(): Promise<MadeUser> {
  const u = await makeUser(t)
  keep(u.password)
  keep(u.token)
  return u
}

const byJwt = (u: { id: string }): AuditActor => ({ kind: 'user', id: u.id, user_id: u.id })
const ANONYMOUS: AuditActor = { kind: 'anonymous', id: null, user_id: null }
const SYSTEM: AuditActor = { kind: 'system', id: null, user_id: null }

describe('accounts', () => {
  test('signup: user.created by an anonymous caller, via signup, with the caller’s user agent', async () => {
    const email = uniqueEmail()
    const res = await t.req('POST', '/v1/auth/signup', {
      headers,
      body: { email, password: keep(newPassword()), full_name: 'Ada' },
    })
    expect(res.status).toBe(200)
    const e = await oneEntry(t, admin, 'user.created', res.body.id)
    expect(e).toMatchObject({
      object: 'audit_event',
      actor: ANONYMOUS,
      user_agent: UA,
      target: { kind: 'user', id: res.body.id },
      org_id: null,
      created_at: t.clock.now(),
      details: { email, platform_role: 'user', via: 'signup' },
    })
    expect(e.id).toStartWith('aud_')
  })

  test('a superadmin creates a user: via admin, the superadmin the actor', async () => {
    const email = uniqueEmail()
    const res = await t.req('POST', '/v1/admin/users', {
      token: admin.token,
      body: { email, full_name: 'Made', password: keep(newPassword()) },
    })
    expect(res.status).toBe(201)
    const e = await oneEntry(t, admin, 'user.created', res.body.id)
    expect(e).toMatchObject({ actor: byJwt(admin), details: { email, via: 'admin' } })
  })

  test('first start: the superadmin is created by the system, via first_start', async () => {
    const f = makeTestApp({ ADMIN_EMAIL: 'root@audit.test', ADMIN_PASSWORD: keep('first-start-password') })
    apps.push(f)
    const made = (await ensureSuperadmin(f.deps, () => {}))!
    const { rows } = await f.deps.store.audit.page({ actions: ['user.created'] }, {})
    expect(rows).toHaveLength(1)
    expect(rows[0]).toMatchObject({
      actor_kind: 'system',
      actor_id: null,
      target_id: made.id,
      details: { email: 'root@audit.test', platform_role: 'superadmin', via: 'first_start' },
    })
  })

  test('sign-in: auth.signed_in with the user as the actor and the method', async () => {
    const u = await user()
    const before = await auditEntries(t, admin, { action: 'auth.signed_in', target_id: u.id })
    const res = await t.req('POST', '/v1/auth/login', {
      headers,
      body: { email: u.email, password: u.password },
    })
    expect(res.status).toBe(200)
    keep(res.body.access_token)
    const after = await auditEntries(t, admin, { action: 'auth.signed_in', target_id: u.id })
    expect(after).toHaveLength(before.length + 1)
    expect(after[0]).toMatchObject({
      actor: byJwt(u),
      user_agent: UA,
      target: { kind: 'user', id: u.id },
      details: { method: 'password' },
    })
  })

  test('failed sign-ins: each refusal is one entry, never the password; a rate-limited attempt writes none', async () => {
    const u = await user() // its login was attempt 1 of RATE_LIMIT_LOGIN_PER_MINUTE (3)
    const wrong = keep(newPassword())
    const attempt = () => t.req('POST', '/v1/auth/login', { body: { email: u.email, password: wrong } })
    expect((await attempt()).status).toBe(401)
    const first = await oneEntry(t, admin, 'auth.sign_in_failed', u.id)
    expect(first).toMatchObject({
      actor: ANONYMOUS,
      target: { kind: 'user', id: u.id },
      details: { email: u.email, reason: 'invalid_credentials', method: 'password' },
    })
    expect((await attempt()).status).toBe(401)
    const limited = await attempt()
    expect(limited.status).toBe(429)
    // Two refusals recorded; the attempt the limiter refused (its 429 in hand) wrote nothing.
    expect(await auditEntries(t, admin, { action: 'auth.sign_in_failed', target_id: u.id })).toHaveLength(2)

    const unknown = uniqueEmail('nobody')
    expect(
      (await t.req('POST', '/v1/auth/login', { body: { email: unknown, password: keep(newPassword()) } }))
        .status,
    ).toBe(401)
    const named = (await auditEntries(t, admin, { action: 'auth.sign_in_failed' })).filter(
      (e) => e.details.email === unknown,
    )
    expect(named).toHaveLength(1)
    expect(named[0]).toMatchObject({
      target: { kind: 'user', id: null },
      details: { reason: 'invalid_credentials' },
    })

    const off = await user()
    expect(
      (await t.req('PATCH', `/v1/admin/users/${off.id}`, { token: admin.token, body: { is_active: false } }))
        .status,
    ).toBe(200)
    const refused = await t.req('POST', '/v1/auth/login', {
      body: { email: off.email, password: off.password },
    })
    expect(refused.status).toBe(403)
    const disabled = await oneEntry(t, admin, 'auth.sign_in_failed', off.id)
    expect(disabled.details).toEqual({ email: off.email, reason: 'account_disabled', method: 'password' })
  })

  test('change-password: user.password_changed by the user; a wrong current password writes none', async () => {
    const u = await user()
    const bad = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: keep(newPassword()), new_password: keep(newPassword()) },
    })
    expect(bad.status).toBe(400)
    expect(await auditEntries(t, admin, { action: 'user.password_changed', target_id: u.id })).toEqual([])
    const res = await t.req('POST', '/v1/auth/change-password', {
      token: u.token,
      body: { current_password: u.password, new_password: keep(newPassword()) },
    })
    expect(res.status).toBe(200)
    keep(res.body.access_token)
    const e = await oneEntry(t, admin, 'user.password_changed', u.id)
    expect(e).toMatchObject({ actor: byJwt(u), target: { kind: 'user', id: u.id }, details: {} })
  })

  test('reset-password: user.password_reset, by the holder of the token (anonymous); a bad token writes none', async () => {
    const u = await user()
    expect((await t.req('POST', '/v1/auth/forgot-password', { body: { email: u.email } })).status).toBe(202)
    const mail = await until('the reset mail', () => t.mail.sent.find((m) => m.to === u.email))
    const token = keep(/token=([\w-]+)/.exec(mail.text)![1]!)
    const wrong = await t.req('POST', '/v1/auth/reset-password', {
      body: { token: keep(`${token}x`), new_password: keep(newPassword()) },
    })
    expect(wrong.status).toBe(400)
    expect(await auditEntries(t, admin, { action: 'user.password_reset', target_id: u.id })).toEqual([])
    const res = await t.req('POST', '/v1/auth/reset-password', {
      body: { token, new_password: keep(newPassword()) },
    })
    expect(res.status).toBe(200)
    const e = await oneEntry(t, admin, 'user.password_reset', u.id)
    expect(e).toMatchObject({ actor: ANONYMOUS, details: { via: 'reset_token' } })
  })

  test('PATCH /v1/admin/users: role_changed, disabled and enabled, one entry per change; no change, no entry', async () => {
    const u = await user()
    const patch = (body: object) => t.req('PATCH', `/v1/admin/users/${u.id}`, { token: admin.token, body })
    expect((await patch({ platform_role: 'superadmin', is_active: false })).status).toBe(200)
    const role = await oneEntry(t, admin, 'user.role_changed', u.id)
    expect(role).toMatchObject({ actor: byJwt(admin), details: { from: 'user', to: 'superadmin' } })
    await oneEntry(t, admin, 'user.disabled', u.id)
    expect((await patch({ is_active: true })).status).toBe(200)
    const enabled = await oneEntry(t, admin, 'user.enabled', u.id)
    expect(enabled.actor).toEqual(byJwt(admin))
    expect((await patch({ is_active: true, platform_role: 'superadmin' })).status).toBe(200)
    expect(await auditEntries(t, admin, { action: 'user.*', target_id: u.id })).toHaveLength(4)
  })
})

describe('personal keys', () => {
  const base = '/v1/users/me/api-keys'

  test('created, renamed, expiry set and revoked: one entry each, never the raw key', async () => {
    const u = await user()
    const made = await t.req('POST', base, { token: u.token, headers, body: { name: 'laptop' } })
    expect(made.status).toBe(201)
    const key = keep(made.body.key as string)
    const created = await oneEntry(t, admin, 'key.personal.created', made.body.id)
    expect(created).toMatchObject({
      actor: byJwt(u),
      user_agent: UA,
      target: { kind: 'key', id: made.body.id },
      org_id: null,
      details: { name: 'laptop', prefix: key.slice(0, 12), expires_at: null },
    })
    const later = t.clock.now() + 3600
    const put = await t.req('PUT', `${base}/${made.body.id}`, {
      token: u.token,
      body: { name: 'ci', expires_at: later },
    })
    expect(put.status).toBe(200)
    expect((await oneEntry(t, admin, 'key.personal.renamed', made.body.id)).details).toEqual({
      from: 'laptop',
      to: 'ci',
    })
    expect((await oneEntry(t, admin, 'key.personal.expiry_set', made.body.id)).details).toEqual({
      from: null,
      to: later,
    })
    expect((await t.req('DELETE', `${base}/${made.body.id}`, { token: u.token })).status).toBe(200)
    // Revoking again answers 200 and changes nothing: still one entry.
    expect((await t.req('DELETE', `${base}/${made.body.id}`, { token: u.token })).status).toBe(200)
    const revoked = await oneEntry(t, admin, 'key.personal.revoked', made.body.id)
    expect(revoked).toMatchObject({ actor: byJwt(u), details: { name: 'ci', prefix: key.slice(0, 12) } })
  })

  test('a key that revokes itself is the actor, with its user', async () => {
    const u = await user()
    const k = await makePersonalKey(t, u)
    keep(k.key)
    expect((await t.req('DELETE', `${base}/${k.id}`, { token: k.key })).status).toBe(200)
    const e = await oneEntry(t, admin, 'key.personal.revoked', k.id)
    expect(e.actor).toEqual({ kind: 'personal_key', id: k.id, user_id: u.id })
    // The user's actions by either credential are found by the user's id.
    const mine = await auditEntries(t, admin, { actor: u.id, action: 'key.personal.*' })
    expect(mine.map((x) => x.action).sort()).toEqual(['key.personal.created', 'key.personal.revoked'])
  })

  test('regenerated: the new key, naming the keys it replaced; a failed rotation writes none', async () => {
    const u = await user()
    const a = await makePersonalKey(t, u, { name: 'a' })
    const b = await makePersonalKey(t, u, { name: 'b' })
    keep(a.key)
    keep(b.key)
    const one = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: a.key, body: { key_id: a.id } })
    expect(one.status).toBe(201)
    keep(one.body.key)
    const e = await oneEntry(t, admin, 'key.personal.regenerated', one.body.id)
    expect(e).toMatchObject({
      actor: { kind: 'personal_key', id: a.id, user_id: u.id },
      details: { name: 'a', prefix: one.body.key.slice(0, 12), replaced: [a.id] },
    })
    // a is revoked now: rotating it again is refused and leaves no entry.
    const again = await t.req('POST', '/v1/auth/api-keys/regenerate', {
      token: u.token,
      body: { key_id: a.id },
    })
    expect(again.status).toBe(400)
    expect(await auditEntries(t, admin, { action: 'key.personal.regenerated', actor: u.id })).toHaveLength(1)
    const all = await t.req('POST', '/v1/auth/api-keys/regenerate', { token: u.token })
    expect(all.status).toBe(201)
    keep(all.body.key)
    const e2 = await oneEntry(t, admin, 'key.personal.regenerated', all.body.id)
    expect(e2.actor).toEqual(byJwt(u))
    expect((e2.details.replaced as string[]).sort()).toEqual([b.id, one.body.id].sort())
  })
})

describe('worker keys and organizations', () => {
  test('worker key created, revoked and regenerated, with their org', async () => {
    const u = await user()
    const org = u.personalOrgId
    const k = await makeWorkerKey(t, u, org)
    keep(k.key)
    const created = await oneEntry(t, admin, 'key.worker.created', k.id)
    expect(created).toMatchObject({
      actor: byJwt(u),
      org_id: org,
      target: { kind: 'key', id: k.id },
      details: { name: 'fleet', prefix: k.key.slice(0, 12) },
    })
    const rotated = await t.req('POST', `/v1/orgs/${org}/api-keys/regenerate`, {
      token: u.token,
      body: { key_id: k.id },
    })
    expect(rotated.status).toBe(201)
    keep(rotated.body.key)
    const r = await oneEntry(t, admin, 'key.worker.regenerated', rotated.body.id)
    expect(r).toMatchObject({ org_id: org, details: { replaced: [k.id] } })
    expect(
      (await t.req('DELETE', `/v1/orgs/${org}/api-keys/${rotated.body.id}`, { token: u.token })).status,
    ).toBe(200)
    const revoked = await oneEntry(t, admin, 'key.worker.revoked', rotated.body.id)
    expect(revoked).toMatchObject({ actor: byJwt(u), org_id: org })
  })

  test('org created; member added, role changed, removed and left; failed changes write none', async () => {
    const owner = await user()
    const ann = await user()
    const bob = await user()
    const res = await t.req('POST', '/v1/orgs', { token: owner.token, body: { name: 'Lab' } })
    expect(res.status).toBe(201)
    const org = res.body.id as string
    expect(await oneEntry(t, admin, 'org.created', org)).toMatchObject({
      actor: byJwt(owner),
      org_id: org,
      target: { kind: 'org', id: org },
      details: { name: 'Lab' },
    })
    const members = `/v1/orgs/${org}/members`
    expect(
      (await t.req('POST', members, { token: owner.token, body: { email: ann.email, role: 'viewer' } }))
        .status,
    ).toBe(201)
    expect(
      (await t.req('POST', members, { token: owner.token, body: { email: bob.email, role: 'admin' } }))
        .status,
    ).toBe(201)
    expect(
      (await t.req('POST', members, { token: owner.token, body: { email: ann.email, role: 'admin' } }))
        .status,
    ).toBe(409)
    expect(await oneEntry(t, admin, 'org.member.added', ann.id, { org_id: org })).toMatchObject({
      actor: byJwt(owner),
      org_id: org,
      target: { kind: 'user', id: ann.id },
      details: { role: 'viewer' },
    })
    expect(
      (await t.req('PATCH', `${members}/${ann.id}`, { token: bob.token, body: { role: 'admin' } })).status,
    ).toBe(200)
    // An admin may not make an owner: refused, no entry.
    expect(
      (await t.req('PATCH', `${members}/${ann.id}`, { token: bob.token, body: { role: 'owner' } })).status,
    ).toBe(403)
    expect(await oneEntry(t, admin, 'org.member.role_changed', ann.id, { org_id: org })).toMatchObject({
      actor: byJwt(bob),
      details: { from: 'viewer', to: 'admin' },
    })
    // The last owner cannot leave: refused, no entry.
    expect((await t.req('DELETE', `${members}/${owner.id}`, { token: owner.token })).status).toBe(400)
    expect(await auditEntries(t, admin, { action: 'org.member.removed', org_id: org })).toEqual([])
    expect((await t.req('DELETE', `${members}/${ann.id}`, { token: bob.token })).status).toBe(200)
    expect(await oneEntry(t, admin, 'org.member.removed', ann.id, { org_id: org })).toMatchObject({
      actor: byJwt(bob),
      details: { role: 'admin', left: false },
    })
    expect((await t.req('DELETE', `${members}/${bob.id}`, { token: bob.token })).status).toBe(200)
    expect((await oneEntry(t, admin, 'org.member.removed', bob.id, { org_id: org })).details).toEqual({
      role: 'admin',
      left: true,
    })
  })
})

describe('catalogue, files and retention', () => {
  test('catalogue.seeded: a seed that changes the catalogue, by the system; an unchanged seed writes none', async () => {
    t.clock.advance(5)
    const since = String(t.clock.now())
    const row = await makeCatalogEntry(t.deps, { id: 'audit-seeded-q4', quantization: 'Q4' })
    await makeCatalogEntry(t.deps, { id: 'audit-seeded-q4', quantization: 'Q4' })
    const entries = await auditEntries(t, admin, { action: 'catalogue.seeded', start: since })
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({
      actor: SYSTEM,
      target: { kind: 'catalogue', id: null },
      details: { inserted: [row.id], updated: [], renamed: [] },
    })
  })

  test('file.deleted by its owner; a file in use is refused and writes none', async () => {
    const u = await user()
    const batch = await makeBatch(t, u, '{"custom_id":"a"}\n')
    const inUse = await t.req('DELETE', `/v1/files/${batch.input_file_id}`, { token: u.token })
    expect([inUse.status, inUse.body.error.code]).toEqual([400, 'file_in_use'])
    expect(await auditEntries(t, admin, { action: 'file.deleted', target_id: batch.input_file_id })).toEqual(
      [],
    )
    const id = await makeFile(t, u, '{"custom_id":"a"}\n')
    const res = await t.req('DELETE', `/v1/files/${id}`, { token: u.token, headers })
    expect(res.status).toBe(200)
    const e = await oneEntry(t, admin, 'file.deleted', id)
    expect(e).toMatchObject({
      actor: byJwt(u),
      user_agent: UA,
      target: { kind: 'file', id },
      details: { filename: 'input.jsonl', purpose: 'batch', bytes: 18 },
    })
    expect((await t.req('DELETE', `/v1/files/${id}`, { token: u.token })).status).toBe(404)
    expect(await auditEntries(t, admin, { action: 'file.deleted', target_id: id })).toHaveLength(1)
  })

  test('retention.files_expired names the files a retention pass deleted', async () => {
    const u = await user()
    const form = uploadForm('{"custom_id":"a"}\n')
    form.append('expires_after[anchor]', 'created_at')
    form.append('expires_after[seconds]', '3600')
    const up = await t.req('POST', '/v1/files', { token: u.token, raw: form })
    expect(up.status).toBe(200)
    t.clock.advance(3600)
    const since = String(t.clock.now())
    const pass = await retentionPass(t.deps)
    expect(pass.expired).toContain(up.body.id)
    const entries = await auditEntries(t, admin, { action: 'retention.files_expired', start: since })
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({
      actor: SYSTEM,
      target: { kind: 'file', id: null },
      details: { count: pass.expired.length, file_ids: pass.expired },
    })
  })
})

test('no entry holds a secret this file used: passwords, raw keys, JWTs, reset tokens', async () => {
  const res = await t.req('GET', '/v1/audit-events?format=jsonl', { token: admin.token })
  expect(res.status).toBe(200)
  const lines = res.text.trim().split('\n')
  // Every action above wrote here (the first-start one is on its own app).
  expect(lines.length).toBeGreaterThan(40)
  expect(secrets.length).toBeGreaterThan(30)
  expect(secrets.filter((s) => res.text.includes(s))).toEqual([])
})

test('AUDIT_RETENTION_DAYS: the retention pass deletes older entries and records that it did', async () => {
  const r = makeTestApp({ AUDIT_RETENTION_DAYS: '2' })
  apps.push(r)
  const old = await makeUser(r) // its signup and sign-in entries
  const oldEntries = (await r.deps.store.audit.page({}, {})).rows
  expect(oldEntries.length).toBeGreaterThanOrEqual(2)
  r.clock.advance(86_400)
  await makeUser(r)
  r.clock.advance(86_400 + 1)
  // The first entries are now older than 2 days; the second user's are not.
  const pass = await retentionPass(r.deps)
  expect(pass.auditExpired).toBe(oldEntries.length)
  const left = (await r.deps.store.audit.page({}, { limit: 100 })).rows
  expect(left.some((e) => e.target_id === old.id && e.action !== 'audit.expired')).toBe(false)
  const expired = left.filter((e) => e.action === 'audit.expired')
  expect(expired).toHaveLength(1)
  expect(expired[0]).toMatchObject({
    actor_kind: 'system',
    target_kind: 'audit',
    details: { count: oldEntries.length, before: r.clock.now() - 2 * 86_400 },
  })
  // Nothing more is due: a second pass deletes nothing and writes nothing.
  expect((await retentionPass(r.deps)).auditExpired).toBe(0)
  expect((await r.deps.store.audit.page({ actions: ['audit.expired'] }, {})).rows).toHaveLength(1)
})

test('AUDIT_RETENTION_DAYS=0 keeps every entry', async () => {
  const r = makeTestApp({ AUDIT_RETENTION_DAYS: '0' })
  apps.push(r)
  await makeUser(r)
  const before = (await r.deps.store.audit.page({}, {})).rows.length
  r.clock.advance(3650 * 86_400)
  expect((await retentionPass(r.deps)).auditExpired).toBe(0)
  expect((await r.deps.store.audit.page({}, {})).rows).toHaveLength(before)
})
