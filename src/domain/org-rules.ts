import type { OrgRole } from '../db/schema'
import { badRequest, forbidden, notFound } from '../lib/errors'

// docs/api.md §3 membership rules, decided once for both engines, inside the transaction that changes
// the membership: only an owner grants or removes `owner`; an org always keeps an owner.

export interface MemberTarget {
  role: OrgRole
}

/** PATCH …/members/{user_id}: may a caller with `actorRole` give `target` the role `role`? */
export function checkRoleChange<T extends MemberTarget>(
  target: T | undefined,
  role: OrgRole,
  actorRole: OrgRole,
  otherOwners: number,
): T {
  if (!target) throw notFound('member_not_found', 'No such member', 'user_id')
  if ((target.role === 'owner' || role === 'owner') && actorRole !== 'owner')
    throw forbidden('insufficient_role', 'Only an owner may grant or remove owner')
  if (target.role === 'owner' && role !== 'owner' && otherOwners === 0)
    throw badRequest('last_owner', 'An organization must keep at least one owner')
  return target
}

/** DELETE …/members/{user_id}: owners and admins remove members; anyone may leave; never the last owner. */
export function checkRemoval(
  target: MemberTarget | undefined,
  self: boolean,
  actorRole: OrgRole,
  otherOwners: number,
): asserts target is MemberTarget {
  if (!target) throw notFound('member_not_found', 'No such member', 'user_id')
  if (target.role === 'owner' && !self && actorRole !== 'owner')
    throw forbidden('insufficient_role', 'Only an owner may remove an owner')
  if (target.role === 'owner' && otherOwners === 0)
    throw badRequest('last_owner', 'An organization must keep at least one owner')
}
