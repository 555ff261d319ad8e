import type { UserRow } from '../db/schema'
import { badRequest } from '../lib/errors'

// docs/api.md §9: the platform always keeps an active superadmin. Decided once for both engines, inside
// the transaction that changes the user, against the other active superadmins counted there.

/** What a superadmin may change on a user (docs/api.md §9), and the first-login gate. */
export type UserChanges = Partial<Pick<UserRow, 'is_active' | 'platform_role' | 'must_change_password'>>

/**
 * docs/api.md §1: a new platform role changes the user's credentials, as a new password does — the
 * token version is bumped, so no JWT issued before it goes on under the old role.
 */
export const changesRole = (target: Pick<UserRow, 'platform_role'>, changes: UserChanges) =>
  changes.platform_role !== undefined && changes.platform_role !== target.platform_role

/** Does this change take an active superadmin away? */
export function losesSuperadmin(target: Pick<UserRow, 'platform_role' | 'is_active'>, changes: UserChanges) {
  return (
    target.platform_role === 'superadmin' &&
    target.is_active &&
    (changes.platform_role === 'user' || changes.is_active === false)
  )
}

/** Would this change take away the last active superadmin (`otherActiveSuperadmins` counted in its transaction)? */
export const takesLastSuperadmin = (
  target: Pick<UserRow, 'platform_role' | 'is_active'>,
  changes: UserChanges,
  otherActiveSuperadmins: number,
) => losesSuperadmin(target, changes) && otherActiveSuperadmins === 0

export function checkLastSuperadmin(
  target: Pick<UserRow, 'platform_role' | 'is_active'>,
  changes: UserChanges,
  otherActiveSuperadmins: number,
): void {
  if (takesLastSuperadmin(target, changes, otherActiveSuperadmins))
    throw badRequest('last_superadmin', 'The last active superadmin cannot be demoted or deactivated')
}
