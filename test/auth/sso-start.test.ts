import { expect, test } from 'bun:test'
import { ConfigError } from '../../src/config'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { checkSuperadminCanSignIn } from '../../src/modules/auth/sso'
import { makeTestApp, startTestServer } from '../helpers/app'

// docs/api.md §2 "Single sign-on": PASSWORD_LOGIN=false leaves only SSO, and the start is refused
// unless a superadmin could then sign in (OIDC_ADMIN_GROUPS makes one, or one is linked already).
// Nothing reaches the provider at start, so none runs here.

const ISSUER = 'https://idp.lab.example/realms/lab'
const ssoOnly = { OIDC_ISSUER: ISSUER, OIDC_CLIENT_ID: 'gridkeep', PASSWORD_LOGIN: 'false' }

test('PASSWORD_LOGIN=false with no superadmin able to sign in stops the start with one line', async () => {
  let error: unknown
  await startTestServer(ssoOnly).then(
    (s) => s.stop(),
    (e) => {
      error = e
    },
  )
  expect(error).toBeInstanceOf(ConfigError)
  expect((error as Error).message).toMatch(
    /^invalid configuration: PASSWORD_LOGIN: false, but no superadmin could sign in/,
  )
  expect((error as Error).message.split('\n')).toHaveLength(1)
})

test('PASSWORD_LOGIN=false with OIDC_ADMIN_GROUPS starts, and makes no password superadmin nobody could use', async () => {
  const server = await startTestServer({ ...ssoOnly, OIDC_ADMIN_GROUPS: 'gridkeep-admins' })
  try {
    expect(await server.deps.store.accounts.hasSuperadmin()).toBe(false)
    expect((await server.req('GET', '/v1/auth/methods')).body).toMatchObject({ password: false })
  } finally {
    await server.stop()
  }
})

test('PASSWORD_LOGIN=false is fine once an active superadmin is linked at OIDC_ISSUER', async () => {
  const t = makeTestApp(ssoOnly)
  try {
    await expect(checkSuperadminCanSignIn(t.deps)).rejects.toBeInstanceOf(ConfigError)
    const admin = await t.deps.store.accounts.createUser(
      {
        email: 'root@lab.example',
        password_hash: '',
        full_name: 'Root',
        platform_role: 'superadmin',
        must_change_password: false,
        now: t.clock.now(),
      },
      "Root's Personal Org",
      SYSTEM_AUDIT,
    )
    // Linked at another issuer: still nobody.
    await t.deps.store.sso.link(
      admin.id,
      { issuer: 'https://other.example', subject: 'root', email: null },
      1,
      undefined,
      SYSTEM_AUDIT,
    )
    await expect(checkSuperadminCanSignIn(t.deps)).rejects.toBeInstanceOf(ConfigError)
    await t.deps.store.sso.link(
      admin.id,
      { issuer: ISSUER, subject: 'root', email: null },
      1,
      undefined,
      SYSTEM_AUDIT,
    )
    await checkSuperadminCanSignIn(t.deps)
    // Deactivated, it cannot sign in any more.
    const other = await t.deps.store.accounts.createUser(
      {
        email: 'second@lab.example',
        password_hash: '',
        full_name: 'Second',
        platform_role: 'superadmin',
        must_change_password: false,
        now: 1,
      },
      'x',
      SYSTEM_AUDIT,
    )
    await t.deps.store.accounts.updateUser(admin.id, { is_active: false }, 2, SYSTEM_AUDIT)
    expect(other.platform_role).toBe('superadmin')
    await expect(checkSuperadminCanSignIn(t.deps)).rejects.toBeInstanceOf(ConfigError)
  } finally {
    t.close()
  }
})

test('PASSWORD_LOGIN=false and OIDC_ALLOWED_DOMAINS: a linked superadmin of a domain not allowed does not count', async () => {
  const t = makeTestApp({ ...ssoOnly, OIDC_ALLOWED_DOMAINS: 'lab.example, Physics.Lab.Example' })
  const superadmin = (email: string) =>
    t.deps.store.accounts.createUser(
      {
        email,
        password_hash: '',
        full_name: 'Root',
        platform_role: 'superadmin',
        must_change_password: false,
        now: 1,
      },
      "Root's Personal Org",
      SYSTEM_AUDIT,
    )
  const link = (userId: string, subject: string, email: string | null) =>
    t.deps.store.sso.link(userId, { issuer: ISSUER, subject, email }, 1, undefined, SYSTEM_AUDIT)
  try {
    // The provider's email decides, as at every sign-in: not the account's own address.
    await link((await superadmin('root@lab.example')).id, 'root', 'root@elsewhere.example')
    await link((await superadmin('quiet@lab.example')).id, 'quiet', null)
    const refused = checkSuperadminCanSignIn(t.deps)
    await expect(refused).rejects.toBeInstanceOf(ConfigError)
    await expect(refused).rejects.toThrow(
      'invalid configuration: PASSWORD_LOGIN: false, but no superadmin could sign in: the 2 linked to OIDC_ISSUER have no email at a domain of OIDC_ALLOWED_DOMAINS, and OIDC_ADMIN_GROUPS is unset',
    )
    await link((await superadmin('grace@physics.lab.example')).id, 'grace', 'Grace@Physics.Lab.Example')
    await checkSuperadminCanSignIn(t.deps)
  } finally {
    t.close()
  }
})
