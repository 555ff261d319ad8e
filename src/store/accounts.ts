import type { UserRow } from '../db/schema'
import type { UserChanges } from '../domain/admin-rules'
import type { AuditContext } from '../domain/audit'
import { newId } from '../lib/ids'
import type { PageParams, RowsPage } from '../lib/pagination'
import type { Identity } from './sso'

// Users and password reset tokens (docs/api.md §2, docs/api.md §2 and §9). The rules — email and password
// checks, the Personal Org's name, the last-superadmin rule (src/domain/admin-rules.ts) — live above
// the seam; each engine carries a decision out atomically. Every change writes its audit entries
// (docs/api.md §17) in its own transaction, with the `audit` context the service passes.

export interface NewUser {
  email: string
  /** '' for an account made by single sign-on: no password verifies against it. */
  password_hash: string
  full_name: string
  platform_role: UserRow['platform_role']
  must_change_password: boolean
  now: number
}

/** A new account's rows: the user, its personal org, and the user as that org's owner. */
export function newAccountRows(input: NewUser, personalOrgName: string) {
  const { now } = input
  const user = {
    id: newId('user_'),
    email: input.email,
    password_hash: input.password_hash,
    full_name: input.full_name,
    platform_role: input.platform_role,
    must_change_password: input.must_change_password,
    created_at: now,
    updated_at: now,
  }
  const org = { id: newId('org_'), name: personalOrgName, personal: true, created_at: now }
  const membership = { org_id: org.id, user_id: user.id, role: 'owner' as const, created_at: now }
  return { user, org, membership }
}

export interface NewResetToken {
  user_id: string
  token_hash: string
  created_at: number
  expires_at: number
}

export interface AccountsStore {
  /**
   * docs/api.md §3: the user, their Personal Org named `personalOrgName` and its owner membership, in one
   * transaction, and with `identity` its link to a provider (docs/api.md §2 "Single sign-on"), with
   * its `user.created` entry. 409 `email_taken` when the email is registered (docs/api.md §2),
   * `identity_conflict` when the identity is linked already.
   */
  createUser(
    user: NewUser,
    personalOrgName: string,
    audit: AuditContext,
    identity?: Identity,
  ): Promise<UserRow>
  /** The credential lookup of a JWT or personal key (docs/api.md §1): runs on every user request. */
  findUserById(id: string): Promise<UserRow | undefined>
  /** Login, forgot-password and add-member look users up by their normalized email. */
  findUserByEmail(email: string): Promise<UserRow | undefined>
  /** docs/api.md §2 first start: is there any superadmin yet? */
  hasSuperadmin(): Promise<boolean>
  /** GET /v1/admin/users: every user, newest first (docs/api.md §0 paging). */
  listUsers(page: PageParams): Promise<RowsPage<UserRow>>
  /**
   * PATCH /v1/admin/users/{id}: undefined for an unknown user; 400 `last_superadmin` when the
   * change would leave no active superadmin (checked race-free against concurrent changes). A new
   * platform role bumps `token_version` (src/domain/admin-rules.ts changesRole). Writes an entry
   * per change of role or activation.
   */
  updateUser(id: string, changes: UserChanges, now: number, audit: AuditContext): Promise<UserRow | undefined>
  /**
   * change-password: the new hash, `must_change_password` cleared, `token_version` bumped so that
   * older JWTs stop working, and a `user.password_changed` entry. Returns the updated user.
   */
  setPassword(
    userId: string,
    passwordHash: string,
    now: number,
    audit: AuditContext,
  ): Promise<UserRow | undefined>
  /** forgot-password: stores a reset token's hash (docs/api.md §2). */
  addResetToken(token: NewResetToken): Promise<void>
  /**
   * reset-password: claims the token (single use, unexpired, its user active) and sets the password
   * as setPassword does, with a `user.password_reset` entry, in one transaction. Returns the user's
   * id; undefined when the token is unknown, used or expired.
   */
  redeemResetToken(
    tokenHash: string,
    passwordHash: string,
    now: number,
    audit: AuditContext,
  ): Promise<string | undefined>
}
