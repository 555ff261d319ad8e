import type { UserRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { AuditContext } from '../../domain/audit'
import { badRequest } from '../../lib/errors'
import type { Identity } from '../../store/sso'

// Creating users is shared by signup, the admin's create-user, the first-start superadmin and the
// first sign-in by single sign-on: each gets a Personal Org with an owner membership in the same
// transaction (docs/api.md §3), the last also its link to the provider's identity, and each a
// `user.created` audit entry whose `via` the actor (and the identity) tells (docs/api.md §17).

const EMAIL = /^[^\s@]+@[^\s@]+$/

export function normalizeEmail(raw: string): string {
  const email = raw.trim().toLowerCase()
  if (!EMAIL.test(email) || email.length > 254)
    throw badRequest('invalid_email', 'Not a valid email address', 'email')
  return email
}

export function checkPassword(password: string, param = 'password'): void {
  if (password.length < 8 || password.length > 256) {
    throw badRequest('weak_password', 'Passwords must be 8 to 256 characters long', param)
  }
}

export type NewUser = {
  email: string
  full_name: string
  platform_role?: 'user' | 'superadmin'
  must_change_password?: boolean
} & (
  | { password: string; identity?: undefined }
  /**
   * No password until its owner sets one: an account made by single sign-on (with its identity),
   * or by an admin while passwords are off (docs/api.md §9).
   */
  | { password?: undefined; identity?: Identity }
)

/** The one place an account is made: the user, their Personal Org and its owner membership. */
export async function createUser(deps: Deps, input: NewUser, audit: AuditContext): Promise<UserRow> {
  const email = normalizeEmail(input.email)
  if (input.password !== undefined) checkPassword(input.password)
  const full_name = input.full_name.trim()
  if (!full_name) throw badRequest('invalid_value', 'full_name must not be blank', 'full_name')
  // Hash before taking the write lock: argon2 is slow and must never run inside a transaction.
  const password_hash = input.password === undefined ? '' : await deps.passwords.hash(input.password)
  return deps.store.accounts.createUser(
    {
      email,
      password_hash,
      full_name,
      platform_role: input.platform_role ?? 'user',
      must_change_password: input.must_change_password ?? false,
      now: deps.clock.now(),
    },
    `${full_name}'s Personal Org`,
    audit,
    input.identity,
  )
}
