import { ConfigError } from '../../config'
import type { UserRow } from '../../db/schema'
import type { Deps } from '../../deps'
import {
  type AuditContext,
  asUser,
  type SignInMethod,
  type SignInRefusal,
  SYSTEM_AUDIT,
  signedIn,
  signInFailed,
} from '../../domain/audit'
import type { UserPrincipal } from '../../domain/principal'
import type { CredentialState } from '../../http/credential-cache'
import { credentialsChanged } from '../../http/credential-cache'
import { AppError, badRequest, forbidden, unauthorized } from '../../lib/errors'
import { randomBase62 } from '../../lib/ids'
import { generateResetToken, sha256Hex } from '../../lib/keys'
import { log } from '../../lib/logger'
import { toUserObject } from '../users/model'
import { checkPassword, createUser } from '../users/service'

/** docs/api.md §2: PASSWORD_LOGIN=false leaves only single sign-on; nothing takes or sets a password. */
function checkPasswordLogin(deps: Deps) {
  if (!deps.config.PASSWORD_LOGIN)
    throw forbidden(
      'password_login_disabled',
      `Passwords are not used on this server; sign in with ${deps.config.OIDC_NAME} (GET /v1/auth/oidc/start)`,
    )
}

export async function signup(
  deps: Deps & CredentialState,
  input: { email: string; password: string; full_name: string },
  audit: AuditContext,
) {
  checkPasswordLogin(deps)
  if (!deps.config.SIGNUP_ENABLED) {
    throw forbidden(
      'signup_disabled',
      'Signup is disabled on this server; ask an administrator for an account',
    )
  }
  return toUserObject(await createUser(deps, input, audit))
}

export async function login(
  deps: Deps & CredentialState,
  input: { email: string; password: string },
  audit: AuditContext,
) {
  checkPasswordLogin(deps)
  const email = input.email.trim().toLowerCase()
  // Taken first: a refused attempt writes no audit entry, so the limit also bounds those writes.
  await deps.store.limits.take(
    'login',
    `${email} ${audit.ip ?? 'local'}`,
    deps.config.RATE_LIMIT_LOGIN_PER_MINUTE,
    60,
  )
  const user = await deps.store.accounts.findUserByEmail(email)
  // Unknown email, an account without a password (made by single sign-on) and a wrong password
  // take the same time and give the same answer; each is recorded (docs/api.md §17), in a
  // transaction of its own: there is no change to go with.
  if (!user || user.password_hash === '') {
    await deps.passwords.burn(input.password)
    await signInRefused(deps, audit, email, user, 'invalid_credentials')
    throw unauthorized('invalid_credentials', 'Incorrect email or password')
  }
  if (!(await deps.passwords.verify(input.password, user.password_hash))) {
    await signInRefused(deps, audit, email, user, 'invalid_credentials')
    throw unauthorized('invalid_credentials', 'Incorrect email or password')
  }
  return issueSession(deps, user, 'password', audit)
}

/**
 * A refused sign-in, by any method, in a transaction of its own (docs/api.md §17); single sign-on's
 * names the provider.
 */
export const signInRefused = (
  deps: Deps,
  audit: AuditContext,
  email: string | null,
  user: UserRow | undefined,
  reason: SignInRefusal,
  how: { method: SignInMethod; issuer?: string } = { method: 'password' },
) =>
  deps.store.audit.record(
    audit,
    [signInFailed(email, user, reason, how.method, how.issuer)],
    deps.clock.now(),
  )

/**
 * The one end of every sign-in, by password or by single sign-on (docs/api.md §2): an active account
 * gets the login JWT and the login answer. Its `auth.signed_in` entry is written first (docs/api.md
 * §17), so no session is issued that the audit log lacks; a deactivated account's refusal is
 * recorded as `auth.sign_in_failed`.
 */
export async function issueSession(deps: Deps, user: UserRow, method: SignInMethod, audit: AuditContext) {
  if (!user.is_active) {
    await signInRefused(deps, audit, user.email, user, 'account_disabled', { method })
    throw forbidden('account_disabled', 'This account has been deactivated')
  }
  await deps.store.audit.record(asUser(audit, user.id), [signedIn(user, method)], deps.clock.now())
  const sso = method === 'sso'
  const { token, expiresIn } = await deps.tokens.sign(user.id, user.token_version, { sso })
  log.info('signed in', { user_id: user.id, method })
  // docs/api.md §1: must_change_password is about passwords; a single sign-on session is not held back.
  const mustChange = user.must_change_password && !sso
  return {
    access_token: token,
    token_type: 'bearer' as const,
    expires_in: expiresIn,
    platform_role: user.platform_role,
    must_change_password: mustChange,
    user: { ...toUserObject(user), must_change_password: mustChange },
  }
}

/** The caller's profile; `must_change_password` as it holds for this session (docs/api.md §1). */
export async function me(deps: Deps & CredentialState, principal: UserPrincipal) {
  const memberships = await deps.store.orgs.listMembershipsOf(principal.user.id)
  const user = toUserObject(principal.user)
  return { ...user, must_change_password: user.must_change_password && !principal.sso, memberships }
}

export async function changePassword(
  deps: Deps & CredentialState,
  principal: UserPrincipal,
  input: { current_password: string; new_password: string },
  audit: AuditContext,
) {
  checkPasswordLogin(deps)
  const user = principal.user
  // docs/api.md §2: an account made by single sign-on has no password to give as the current one.
  if (user.password_hash === '')
    throw badRequest(
      'invalid_current_password',
      `This account has no password (it signs in with ${deps.config.OIDC_NAME}); set one with forgot-password`,
      'current_password',
    )
  if (!(await deps.passwords.verify(input.current_password, user.password_hash))) {
    throw badRequest('invalid_current_password', 'The current password is not correct', 'current_password')
  }
  checkPassword(input.new_password, 'new_password')
  const hash = await deps.passwords.hash(input.new_password)
  // The token version is bumped: every JWT issued before this one stops working.
  const fresh = (await deps.store.accounts.setPassword(user.id, hash, deps.clock.now(), audit))!
  credentialsChanged(deps, [user.id])
  const { token, expiresIn } = await deps.tokens.sign(fresh.id, fresh.token_version)
  return { status: 'password_changed' as const, access_token: token, expires_in: expiresIn }
}

/**
 * Always answers the same (docs/api.md §2: no user enumeration). For an active user, a fresh token is
 * stored hashed and mailed; the mail goes out after the response, so timing reveals nothing either.
 */
export async function forgotPassword(deps: Deps & CredentialState, input: { email: string }) {
  checkPasswordLogin(deps)
  const email = input.email.trim().toLowerCase()
  await deps.store.limits.take('forgot', email, deps.config.RATE_LIMIT_FORGOT_PER_HOUR, 3600)
  const user = await deps.store.accounts.findUserByEmail(email)
  if (user?.is_active) {
    const token = generateResetToken()
    const now = deps.clock.now()
    await deps.store.accounts.addResetToken({
      user_id: user.id,
      token_hash: sha256Hex(token),
      created_at: now,
      expires_at: now + deps.config.RESET_TOKEN_TTL_SECONDS,
    })
    const link = `${deps.config.PUBLIC_URL}/reset-password?token=${encodeURIComponent(token)}`
    const minutes = Math.round(deps.config.RESET_TOKEN_TTL_SECONDS / 60)
    deps.mailer
      .send({
        to: user.email,
        subject: 'Reset your gridkeep password',
        text:
          `Someone asked to reset the password of your gridkeep account.\n\n` +
          `Open this link to choose a new password:\n${link}\n\n` +
          `Or use this reset token with POST /v1/auth/reset-password:\n${token}\n\n` +
          `The token works once and expires in ${minutes} minutes. If you did not ask, ignore this mail.\n`,
      })
      .catch((error) => log.error('reset mail failed', { to: user.email, error }))
  }
  return { status: 'accepted' as const }
}

export async function resetPassword(
  deps: Deps & CredentialState,
  input: { token: string; new_password: string },
  audit: AuditContext,
) {
  checkPasswordLogin(deps)
  checkPassword(input.new_password, 'new_password')
  const hash = await deps.passwords.hash(input.new_password)
  const now = deps.clock.now()
  // Single use, unexpired, and its user still active; the password is set in the same transaction.
  const userId = await deps.store.accounts.redeemResetToken(sha256Hex(input.token), hash, now, audit)
  if (!userId)
    throw badRequest('invalid_reset_token', 'This reset token is unknown, used or expired', 'token')
  // The token version was bumped: the user's older JWTs stop working from the next request.
  credentialsChanged(deps, [userId])
  return { status: 'password_reset' as const }
}

/**
 * First start (docs/api.md §2): without any superadmin, create one from ADMIN_EMAIL / ADMIN_PASSWORD with
 * must_change_password. A generated password is printed once, to the console, never to the log.
 */
export async function ensureSuperadmin(
  deps: Deps & CredentialState,
  print: (line: string) => void = console.error,
) {
  // PASSWORD_LOGIN=false: a password superadmin could never sign in (docs/api.md §2 "Single sign-on").
  if (!deps.config.PASSWORD_LOGIN || (await deps.store.accounts.hasSuperadmin())) return null
  const generated = deps.config.ADMIN_PASSWORD === undefined
  const password = deps.config.ADMIN_PASSWORD ?? randomBase62(20)
  const user = await createUser(
    deps,
    {
      email: deps.config.ADMIN_EMAIL,
      password,
      full_name: 'Administrator',
      platform_role: 'superadmin',
      must_change_password: true,
    },
    SYSTEM_AUDIT,
  ).catch(async (error) => {
    // docs/api.md §12: instances starting together race for the first superadmin; the losers find
    // the winner's. An ordinary user holding ADMIN_EMAIL still stops the start, with one line.
    if (!(error instanceof AppError) || error.errorCode !== 'email_taken') throw error
    if (await deps.store.accounts.hasSuperadmin()) return null
    throw new ConfigError(
      `invalid configuration: ADMIN_EMAIL: there is no superadmin, and ${deps.config.ADMIN_EMAIL} is an account that is not one, so no first superadmin can be made; set ADMIN_EMAIL to an unused address to make one, then sign in with it and give the role back on the Admin page`,
    )
  })
  if (!user) return null
  log.info('created superadmin', { user_id: user.id, email: user.email })
  if (generated) {
    print(
      `\n  gridkeep: created superadmin ${user.email} with password: ${password}\n` +
        `  It is shown only this once. Log in and change it: POST /v1/auth/change-password\n`,
    )
  }
  return user
}
