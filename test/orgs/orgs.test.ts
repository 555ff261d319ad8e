import { afterAll, describe, expect, test } from 'bun:test'
import { sha256Hex } from '../../src/lib/keys'
import { makeTestApp } from '../helpers/app'
import { type MadeUser, makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
afterAll(() => t.close())

/** A team org owned by `owner` with an admin and a viewer. */
async function team() {
  const owner = await makeUser(t)
  const admin = await makeUser(t)
  const viewer = await makeUser(t)
  const outsider = await makeUser(t)
  const org = (await t.req('POST', '/v1/orgs', { token: owner.token, body: { name: 'Vision Lab' } })).body
  for (const [u, role] of [
    [admin, 'admin'],
    [viewer, 'viewer'],
  ] as const) {
    const res = await t.req('POST', `/v1/orgs/${org.id}/members`, {
      token: owner.token,
      body: { email: u.email, role },
    })
    expect(res.status).toBe(201)
  }
  return { org, owner, admin, viewer, outsider }
}

describe('GET /v1/orgs', () => {
  test("lists the caller's orgs with their role, newest first", async () => {
    const u = await makeUser(t)
    const created = await t.req('POST', '/v1/orgs', { token: u.token, body: { name: '  Robotics  ' } })
    expect(created.status).toBe(201)
    expect(created.body).toMatchObject({
      object: 'organization',
      name: 'Robotics',
      personal: false,
      role: 'owner',
    })
    expect(created.body.id).toMatch(/^org_/)
    const list = await t.req('GET', '/v1/orgs', { token: u.token })
    expect(list.body.object).toBe('list')
    expect(list.body.data.map((o: any) => [o.id, o.role, o.personal])).toEqual([
      [created.body.id, 'owner', false],
      [u.personalOrgId, 'owner', true],
    ])
    const page = await t.req('GET', '/v1/orgs?limit=1', { token: u.token })
    expect(page.body).toMatchObject({ has_more: true, first_id: created.body.id })
    const rest = await t.req('GET', `/v1/orgs?limit=1&after=${page.body.last_id}`, { token: u.token })
    expect(rest.body.data.map((o: any) => o.id)).toEqual([u.personalOrgId])
  })

  test('a blank name is a 400', async () => {
    const u = await makeUser(t)
    expect((await t.req('POST', '/v1/orgs', { token: u.token, body: { name: '   ' } })).status).toBe(400)
    expect((await t.req('POST', '/v1/orgs', { token: u.token, body: {} })).status).toBe(400)
  })
})

describe('org worker keys', () => {
  test('owner and admin create (raw once, hashed), members list prefixes, viewers may not create', async () => {
    const { org, owner, admin, viewer, outsider } = await team()
    const byOwner = await t.req('POST', `/v1/orgs/${org.id}/api-keys`, {
      token: owner.token,
      body: { name: 'rack-1' },
    })
    expect(byOwner.status).toBe(201)
    expect(byOwner.body).toMatchObject({ key_type: 'worker', org_id: org.id, user_id: null, name: 'rack-1' })
    const raw = byOwner.body.key
    expect(
      (await t.deps.store.keys.findKey({ type: 'worker', orgId: org.id }, byOwner.body.id))?.key_hash,
    ).toBe(sha256Hex(raw))
    expect(
      (await t.req('POST', `/v1/orgs/${org.id}/api-keys`, { token: admin.token, body: {} })).status,
    ).toBe(201)
    const denied = await t.req('POST', `/v1/orgs/${org.id}/api-keys`, { token: viewer.token, body: {} })
    expect(denied.status).toBe(403)
    expect(denied.body.error).toMatchObject({ type: 'permission_error', code: 'insufficient_role' })
    const list = await t.req('GET', `/v1/orgs/${org.id}/api-keys`, { token: viewer.token })
    expect(list.status).toBe(200)
    expect(list.body.data).toHaveLength(2)
    expect(list.body.data.every((k: any) => k.key === undefined && k.prefix.length === 12)).toBe(true)
    for (const [method, path] of [
      ['GET', `/v1/orgs/${org.id}/api-keys`],
      ['POST', `/v1/orgs/${org.id}/api-keys`],
      ['DELETE', `/v1/orgs/${org.id}/api-keys/${byOwner.body.id}`],
      ['POST', `/v1/orgs/${org.id}/api-keys/regenerate`],
      ['GET', `/v1/orgs/${org.id}/members`],
    ] as const) {
      const res = await t.req(method, path, {
        token: outsider.token,
        body: method === 'POST' ? {} : undefined,
      })
      expect([path, res.status, res.body.error?.code]).toEqual([path, 404, 'org_not_found'])
    }
  })

  test('revocation stops the key on its very next request', async () => {
    const { org, owner, viewer } = await team()
    const k = await makeWorkerKey(t, owner, org.id)
    const path = `/v1/orgs/${org.id}/api-keys/${k.id}`
    expect((await t.req('DELETE', path, { token: viewer.token })).status).toBe(403)
    const del = await t.req('DELETE', path, { token: owner.token })
    expect(del.status).toBe(200)
    expect(del.body.revoked_at).toBe(t.clock.now())
    const row = (await t.deps.store.keys.findKey({ type: 'worker', orgId: org.id }, k.id))!
    expect(row.revoked_at).not.toBeNull()
    // Another org's key id in this org's path is a 404.
    const other = await makeUser(t)
    const foreign = await makeWorkerKey(t, other, other.personalOrgId)
    expect(
      (await t.req('DELETE', `/v1/orgs/${org.id}/api-keys/${foreign.id}`, { token: owner.token })).status,
    ).toBe(404)
  })

  test('regenerate rotates one key (same name) or all keys of the org', async () => {
    const { org, owner, admin } = await team()
    const a = await makeWorkerKey(t, owner, org.id)
    const b = await makeWorkerKey(t, owner, org.id)
    const one = await t.req('POST', `/v1/orgs/${org.id}/api-keys/regenerate`, {
      token: admin.token,
      body: { key_id: a.id },
    })
    expect(one.status).toBe(201)
    expect(one.body).toMatchObject({ name: 'fleet', key_type: 'worker', org_id: org.id })
    const keys = (await t.req('GET', `/v1/orgs/${org.id}/api-keys`, { token: owner.token })).body.data
    const state = Object.fromEntries(keys.map((k: any) => [k.id, k.revoked_at !== null]))
    expect(state).toEqual({ [a.id]: true, [b.id]: false, [one.body.id]: false })
    const all = await t.req('POST', `/v1/orgs/${org.id}/api-keys/regenerate`, { token: owner.token })
    expect(all.status).toBe(201)
    expect(all.body.name).toBe('default')
    const after = (await t.req('GET', `/v1/orgs/${org.id}/api-keys`, { token: owner.token })).body.data
    expect(after.filter((k: any) => k.revoked_at === null).map((k: any) => k.id)).toEqual([all.body.id])
  })

  test('a superadmin manages any org as if owner', async () => {
    const { org } = await team()
    const sa = await makeSuperadmin(t)
    expect((await t.req('POST', `/v1/orgs/${org.id}/api-keys`, { token: sa.token, body: {} })).status).toBe(
      201,
    )
    expect((await t.req('GET', `/v1/orgs/${org.id}/members`, { token: sa.token })).status).toBe(200)
  })
})

describe('members', () => {
  test('list shows members with roles', async () => {
    const { org, owner, admin, viewer } = await team()
    const res = await t.req('GET', `/v1/orgs/${org.id}/members`, { token: viewer.token })
    expect(res.status).toBe(200)
    expect(res.body.data.map((m: any) => [m.user_id, m.role])).toEqual([
      [owner.id, 'owner'],
      [admin.id, 'admin'],
      [viewer.id, 'viewer'],
    ])
  })

  test('add: unknown email 404, duplicate 409, personal org 400, viewer 403, only owners grant owner', async () => {
    const { org, owner, admin, viewer } = await team()
    const extra = await makeUser(t)
    const add = (by: MadeUser, body: object) =>
      t.req('POST', `/v1/orgs/${org.id}/members`, { token: by.token, body })
    expect((await add(owner, { email: 'nobody@example.test', role: 'viewer' })).body.error.code).toBe(
      'user_not_found',
    )
    expect((await add(owner, { email: viewer.email, role: 'viewer' })).status).toBe(409)
    expect((await add(viewer, { email: extra.email, role: 'viewer' })).status).toBe(403)
    expect((await add(admin, { email: extra.email, role: 'owner' })).status).toBe(403)
    expect((await add(owner, { email: extra.email, role: 'superuser' })).status).toBe(400)
    const personal = await t.req('POST', `/v1/orgs/${owner.personalOrgId}/members`, {
      token: owner.token,
      body: { email: extra.email, role: 'viewer' },
    })
    expect(personal.status).toBe(400)
    expect(personal.body.error.code).toBe('personal_org')
    const ok = await add(admin, { email: extra.email.toUpperCase(), role: 'admin' })
    expect(ok.status).toBe(201)
    expect(ok.body).toMatchObject({ object: 'organization.member', user_id: extra.id, role: 'admin' })
    // The new member sees the org and its keys now.
    expect((await t.req('GET', `/v1/orgs/${org.id}/api-keys`, { token: extra.token })).status).toBe(200)
  })

  test('role changes: admins cannot touch owners; the last owner stays', async () => {
    const { org, owner, admin, viewer } = await team()
    const patch = (by: MadeUser, who: MadeUser, role: string) =>
      t.req('PATCH', `/v1/orgs/${org.id}/members/${who.id}`, { token: by.token, body: { role } })
    expect((await patch(admin, viewer, 'admin')).body.role).toBe('admin')
    expect((await patch(admin, viewer, 'owner')).status).toBe(403)
    expect((await patch(admin, owner, 'viewer')).status).toBe(403)
    const last = await patch(owner, owner, 'admin')
    expect(last.status).toBe(400)
    expect(last.body.error.code).toBe('last_owner')
    expect((await patch(owner, admin, 'owner')).body.role).toBe('owner')
    expect((await patch(owner, owner, 'viewer')).body.role).toBe('viewer')
    expect(
      (
        await t.req('PATCH', `/v1/orgs/${org.id}/members/user_nobody`, {
          token: admin.token,
          body: { role: 'viewer' },
        })
      ).status,
    ).toBe(404)
  })

  test('removal: admins remove members, anyone may leave, the last owner cannot go', async () => {
    const { org, owner, admin, viewer, outsider } = await team()
    const del = (by: MadeUser, who: MadeUser) =>
      t.req('DELETE', `/v1/orgs/${org.id}/members/${who.id}`, { token: by.token })
    expect((await del(viewer, admin)).status).toBe(403)
    expect((await del(admin, owner)).status).toBe(403)
    expect((await del(owner, owner)).body.error.code).toBe('last_owner')
    expect((await del(outsider, viewer)).status).toBe(404)
    expect((await del(viewer, viewer)).body).toMatchObject({ deleted: true })
    // The viewer left: the org is now invisible to them.
    expect((await t.req('GET', `/v1/orgs/${org.id}/members`, { token: viewer.token })).status).toBe(404)
    expect((await del(admin, admin)).status).toBe(200)
    expect((await t.req('GET', `/v1/orgs/${org.id}/members`, { token: owner.token })).body.data).toHaveLength(
      1,
    )
  })
})
