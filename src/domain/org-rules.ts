import type { OrgRole } from '../db/schema'
import { badRequest, conflict, forbidden, notFound } from '../lib/errors'

// docs/api.md §3 membership rules, decided once for both engines, inside the transaction that changes
// the membership: only an owner grants or removes `owner`; an org always keeps an owner. And when an
// org may be deleted.

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

/**
 * DELETE /v1/orgs/{org_id}, under the org's lock: a Personal Org is its owner's for as long as the
 * account lives (409 `personal_org`); an org with workers keeps them until they are removed (409
 * `org_has_workers`: their batches must go back to the queue first, and a running daemon told).
 */
export function checkOrgDeletion(org: { personal: boolean } | undefined, workers: number): void {
  if (!org) throw notFound('org_not_found', 'No such organization')
  if (org.personal)
    throw conflict(
      'personal_org',
      'A Personal Org cannot be deleted: it lives as long as its owner’s account',
    )
  if (workers > 0)
    throw conflict(
      'org_has_workers',
      `This organization still has ${workers} worker${workers === 1 ? '' : 's'}: remove ${workers === 1 ? 'it' : 'them'} first (DELETE /v1/orgs/{org_id}/workers/{worker_id})`,
    )
}
