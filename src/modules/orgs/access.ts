import type { OrgRole, OrgRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import { forbidden, notFound } from '../../lib/errors'

// The one org-role check (docs/api.md §1, docs/api.md §3): a non-member gets 404 (never leak that the
// org exists), a member without the role 403. Superadmins pass every check as if owner.

const RANK: Record<OrgRole, number> = { viewer: 1, admin: 2, owner: 3 }

export interface OrgAccess {
  org: OrgRow
  role: OrgRole
}

export async function requireOrgRole(
  deps: Deps,
  principal: UserPrincipal,
  orgId: string,
  least: OrgRole,
): Promise<OrgAccess> {
  const row = await deps.store.orgs.findAccess(orgId, principal.user.id)
  const superadmin = principal.user.platform_role === 'superadmin'
  if (!row || (!row.role && !superadmin)) throw notFound('org_not_found', 'No such organization')
  const role: OrgRole = superadmin ? 'owner' : row.role!
  if (RANK[role] < RANK[least]) {
    throw forbidden(
      'insufficient_role',
      `This action needs the ${least === 'admin' ? 'owner or admin' : least} role`,
    )
  }
  return { org: row.org, role }
}
