import { expect } from 'bun:test'
import type { UserChanges } from '../../src/domain/admin-rules'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { randomBase62 } from '../../src/lib/ids'
import { createUser } from '../../src/modules/users/service'
import type { TestApp, TestServer } from './app'
import { rememberSecret } from './secrets'

// Builders that read like the spec: makeUser(), makeSuperadmin(), makePersonalKey(), makeWorkerKey().
// Every secret they handle is remembered for the suite-wide log scan.

type Target = Pick<TestApp, 'req' | 'deps'> | Pick<TestServer, 'req' | 'deps'>

export interface MadeUser {
  id: string
  email: string
  password: string
  token: string
  personalOrgId: string
}

let counter = 0
export const uniqueEmail = (hint = 'user') =>
  `${hint}-${++counter}-${randomBase62(6).toLowerCase()}@example.test`
export const newPassword = () => `pw-${randomBase62(16)}`

export async function makeUser(
  t: Target,
  opts: { email?: string; full_name?: string } = {},
): Promise<MadeUser> {
  const email = opts.email ?? uniqueEmail()
  const password = newPassword()
  rememberSecret(password)
  const signup = await t.req('POST', '/v1/auth/signup', {
    body: { email, password, full_name: opts.full_name ?? 'Test User' },
  })
  expect(signup.status).toBe(200)
  return { ...(await loginAs(t, email, password)), id: signup.body.id }
}

export async function loginAs(t: Target, email: string, password: string) {
  const login = await t.req('POST', '/v1/auth/login', { body: { email, password } })
  expect(login.status).toBe(200)
  const id = login.body.user.id as string
  const [personal] = await t.deps.store.orgs.listMembershipsOf(id)
  return { id, email, password, token: login.body.access_token as string, personalOrgId: personal!.org_id }
}

/** A superadmin who has already changed the password (so the gate is open). */
export async function makeSuperadmin(t: Target): Promise<MadeUser> {
  const email = uniqueEmail('admin')
  const password = newPassword()
  rememberSecret(password)
  await createUser(
    t.deps,
    { email, password, full_name: 'Super Admin', platform_role: 'superadmin' },
    SYSTEM_AUDIT,
  )
  return loginAs(t, email, password)
}

export async function makePersonalKey(
  t: Target,
  user: { token: string },
  body: Record<string, unknown> = {},
) {
  const res = await t.req('POST', '/v1/users/me/api-keys', { token: user.token, body })
  expect(res.status).toBe(201)
  return { id: res.body.id as string, key: res.body.key as string }
}

export async function makeWorkerKey(t: Target, user: { token: string }, orgId: string) {
  const res = await t.req('POST', `/v1/orgs/${orgId}/api-keys`, {
    token: user.token,
    body: { name: 'fleet' },
  })
  expect(res.status).toBe(201)
  return { id: res.body.id as string, key: res.body.key as string }
}

export async function setUserFlags(t: Target, userId: string, flags: UserChanges) {
  await t.deps.store.accounts.updateUser(userId, flags, t.deps.clock.now(), SYSTEM_AUDIT)
}
