import { afterEach, expect, test } from 'bun:test'
import { rmSync } from 'node:fs'
import { createApp } from '../../src/app'
import { createServer, type Server } from '../../src/compose'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { manualClock } from '../../src/lib/clock'
import { createUser } from '../../src/modules/users/service'
import {
  buildRequest,
  type CapturingMailer,
  capturingMailer,
  cheapPasswords,
  readRes,
  testConfig,
} from '../helpers/app'
import { newPassword, uniqueEmail } from '../helpers/builders'
import { rememberSecret } from '../helpers/secrets'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// The accounts routes (auth, personal and worker keys, orgs and members, admin users and orgs) on
// each engine (docs/api.md §12): the app's own SQLite database is left empty and the state lives only in
// the engine's store, so a module that still read the database behind the seam would fail here.

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `accounts over HTTP on ${kind}`, () => {
    let h: StoreHarness
    let deps: Server
    let mail: CapturingMailer
    let req: (
      method: string,
      path: string,
      o?: Parameters<typeof buildRequest>[3],
    ) => ReturnType<typeof readRes>
    afterEach(async () => {
      deps.sqlite.close()
      rmSync(deps.config.DATA_DIR, { recursive: true, force: true })
      await h.close()
    })

    async function setUp() {
      h = await open()
      mail = capturingMailer()
      // DATABASE_URL: '' keeps the app's own database on SQLite in the PostgreSQL run.
      const base = createServer(testConfig({ PUBLIC_URL: 'https://gk.test', DATABASE_URL: '' }), {
        clock: manualClock(),
        mailer: mail,
        passwords: cheapPasswords(),
      })
      deps = { ...base, store: h.store }
      const app = createApp(deps)
      req = async (method, path, o) =>
        readRes(await app.handle(buildRequest('http://localhost', method, path, o)))
    }

    async function signupAndLogin(full_name = 'Ann') {
      const email = uniqueEmail()
      const password = newPassword()
      rememberSecret(password)
      expect((await req('POST', '/v1/auth/signup', { body: { email, password, full_name } })).status).toBe(
        200,
      )
      const login = await req('POST', '/v1/auth/login', { body: { email, password } })
      expect(login.status).toBe(200)
      return { id: login.body.user.id as string, email, password, token: login.body.access_token as string }
    }

    test('signup, login, me, keys, password change and reset', async () => {
      await setUp()
      const u = await signupAndLogin('Grace')
      const me = await req('GET', '/v1/auth/me', { token: u.token })
      expect(me.body).toMatchObject({ email: u.email, is_active: true, must_change_password: false })
      expect(me.body.memberships).toEqual([
        { org_id: expect.any(String), org_name: "Grace's Personal Org", role: 'owner', personal: true },
      ])
      // A personal key works, is listed by prefix, and a rotation revokes it.
      const key = await req('POST', '/v1/users/me/api-keys', { token: u.token, body: { name: 'laptop' } })
      expect(key.status).toBe(201)
      const list = await req('GET', '/v1/users/me/api-keys', { token: u.token })
      expect(list.body.data.map((k: { id: string }) => k.id)).toEqual([key.body.id])
      const rotated = await req('POST', '/v1/auth/api-keys/regenerate', {
        token: key.body.key,
        body: { key_id: key.body.id },
      })
      expect(rotated.status).toBe(201)
      expect(rotated.body.name).toBe('laptop')
      expect((await req('GET', '/v1/models', { token: key.body.key })).body.error.code).toBe(
        'api_key_revoked',
      )
      const renamed = await req('PUT', `/v1/users/me/api-keys/${rotated.body.id}`, {
        token: u.token,
        body: { name: 'desk' },
      })
      expect(renamed.body.name).toBe('desk')
      // A password change revokes older JWTs.
      const changed = await req('POST', '/v1/auth/change-password', {
        token: u.token,
        body: { current_password: u.password, new_password: 'a-new-password-1' },
      })
      expect(changed.status).toBe(200)
      expect((await req('GET', '/v1/auth/me', { token: u.token })).body.error.code).toBe('token_revoked')
      expect((await req('GET', '/v1/auth/me', { token: changed.body.access_token })).status).toBe(200)
      // Forgot and reset.
      expect((await req('POST', '/v1/auth/forgot-password', { body: { email: u.email } })).status).toBe(202)
      await Bun.sleep(0)
      const token = /token=([\w-]+)/.exec(mail.sent.at(-1)!.text)![1]!
      rememberSecret(token)
      const reset = { token, new_password: 'a-reset-password-2' }
      expect((await req('POST', '/v1/auth/reset-password', { body: reset })).status).toBe(200)
      expect((await req('POST', '/v1/auth/reset-password', { body: reset })).body.error.code).toBe(
        'invalid_reset_token',
      )
      const again = await req('POST', '/v1/auth/login', {
        body: { email: u.email, password: 'a-reset-password-2' },
      })
      expect(again.status).toBe(200)
    })

    test('team orgs, members, worker keys and the admin views', async () => {
      await setUp()
      const owner = await signupAndLogin()
      const other = await signupAndLogin('Bob')
      const org = await req('POST', '/v1/orgs', { token: owner.token, body: { name: 'Lab' } })
      expect(org.status).toBe(201)
      const members = `/v1/orgs/${org.body.id}/members`
      expect((await req('GET', members, { token: other.token })).status).toBe(404)
      const added = await req('POST', members, {
        token: owner.token,
        body: { email: other.email, role: 'viewer' },
      })
      expect(added.status).toBe(201)
      expect(
        (await req('POST', members, { token: owner.token, body: { email: other.email, role: 'viewer' } }))
          .status,
      ).toBe(409)
      expect(
        (await req('POST', `/v1/orgs/${org.body.id}/api-keys`, { token: other.token, body: {} })).status,
      ).toBe(403)
      const wk = await req('POST', `/v1/orgs/${org.body.id}/api-keys`, {
        token: owner.token,
        body: { name: 'rack' },
      })
      expect(wk.status).toBe(201)
      expect(
        (await req('GET', `/v1/orgs/${org.body.id}/api-keys`, { token: other.token })).body.data,
      ).toHaveLength(1)
      expect(
        (await req('DELETE', `/v1/orgs/${org.body.id}/api-keys/${wk.body.id}`, { token: owner.token })).body
          .revoked_at,
      ).not.toBeNull()
      expect(
        (await req('PATCH', `${members}/${owner.id}`, { token: owner.token, body: { role: 'admin' } })).body
          .error.code,
      ).toBe('last_owner')
      expect(
        (await req('PATCH', `${members}/${other.id}`, { token: owner.token, body: { role: 'owner' } })).body
          .role,
      ).toBe('owner')
      expect((await req('DELETE', `${members}/${owner.id}`, { token: owner.token })).status).toBe(200)
      expect(
        (await req('GET', members, { token: other.token })).body.data.map(
          (m: { user_id: string }) => m.user_id,
        ),
      ).toEqual([other.id])
      const orgs = await req('GET', '/v1/orgs', { token: other.token })
      expect(orgs.body.data.map((o: { name: string; role: string }) => [o.name, o.role])).toEqual([
        ['Lab', 'owner'],
        ["Bob's Personal Org", 'owner'],
      ])
      // Admin views.
      const password = newPassword()
      rememberSecret(password)
      const adminEmail = uniqueEmail('admin')
      await createUser(
        deps,
        { email: adminEmail, password, full_name: 'Root', platform_role: 'superadmin' },
        SYSTEM_AUDIT,
      )
      const admin = (await req('POST', '/v1/auth/login', { body: { email: adminEmail, password } })).body
      const token = admin.access_token
      expect((await req('GET', '/v1/admin/users', { token })).body.data).toHaveLength(3)
      const all = await req('GET', '/v1/admin/organizations', { token })
      expect(all.body.data.find((o: { name: string }) => o.name === 'Lab').member_count).toBe(1)
      expect(
        (await req('PATCH', `/v1/admin/users/${admin.user.id}`, { token, body: { platform_role: 'user' } }))
          .body.error.code,
      ).toBe('last_superadmin')
      expect(
        (await req('PATCH', `/v1/admin/users/${other.id}`, { token, body: { is_active: false } })).body
          .is_active,
      ).toBe(false)
      expect((await req('GET', '/v1/orgs', { token: other.token })).status).toBe(401)
    })
  })
}
