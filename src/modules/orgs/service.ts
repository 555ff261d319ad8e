import type { OrgRole, OrgRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { AuditContext } from '../../domain/audit'
import type { UserPrincipal } from '../../domain/principal'
import { type CredentialState, credentialsChanged } from '../../http/credential-cache'
import { badRequest, forbidden, notFound } from '../../lib/errors'
import { type PageParams, toPage } from '../../lib/pagination'
import type { Member } from '../../store/orgs'
import { requireOrgRole } from './access'

// Organizations (docs/api.md §3, docs/api.md §3): the caller's orgs, team orgs and their members. Roles:
// viewer < admin < owner; only an owner grants or removes `owner`; an org always keeps an owner
// (src/domain/org-rules.ts, applied by the store inside the transaction that changes the membership).

const toOrg = (o: OrgRow, role: OrgRole) => ({
  id: o.id,
  object: 'organization' as const,
  name: o.name,
  personal: o.personal,
  role,
  created_at: o.created_at,
})

export async function listMyOrgs(deps: Deps, principal: UserPrincipal, query: PageParams) {
  const { rows, has_more } = await deps.store.orgs.listOrgsOf(principal.user.id, query)
  return toPage(
    rows.map((r) => toOrg(r.org, r.role)),
    has_more,
  )
}

export async function createTeamOrg(
  deps: Deps,
  principal: UserPrincipal,
  input: { name: string },
  audit: AuditContext,
) {
  const name = input.name.trim()
  if (!name) throw badRequest('invalid_value', 'name must not be blank', 'name')
  return toOrg(await deps.store.orgs.createTeamOrg(name, principal.user.id, deps.clock.now(), audit), 'owner')
}

/**
 * DELETE /v1/orgs/{org_id} (owner only, docs/api.md §3): a team org without workers goes, with its
 * worker keys (unknown from the next request on, here and on every other instance) and memberships.
 */
export async function deleteOrg(
  deps: Deps & CredentialState,
  principal: UserPrincipal,
  orgId: string,
  audit: AuditContext,
) {
  await requireOrgRole(deps, principal, orgId, 'owner')
  await deps.store.orgs.deleteOrg(orgId, deps.clock.now(), audit)
  credentialsChanged(deps, [orgId])
  return { id: orgId, object: 'organization' as const, deleted: true as const }
}

const toMember = (m: Member) => ({
  id: m.user_id,
  object: 'organization.member' as const,
  user_id: m.user_id,
  email: m.email,
  full_name: m.full_name,
  role: m.role,
  created_at: m.created_at,
})

export async function listMembers(deps: Deps, principal: UserPrincipal, orgId: string) {
  await requireOrgRole(deps, principal, orgId, 'viewer')
  return toPage((await deps.store.orgs.listMembers(orgId)).map(toMember), false)
}

export async function addMember(
  deps: Deps,
  principal: UserPrincipal,
  orgId: string,
  input: { email: string; role: OrgRole },
  audit: AuditContext,
) {
  const access = await requireOrgRole(deps, principal, orgId, 'admin')
  if (access.org.personal) throw badRequest('personal_org', 'A Personal Org has no other members')
  if (input.role === 'owner' && access.role !== 'owner')
    throw forbidden('insufficient_role', 'Only an owner may grant owner')
  const user = await deps.store.accounts.findUserByEmail(input.email.trim().toLowerCase())
  if (!user) throw notFound('user_not_found', 'No user with this email', 'email')
  const now = deps.clock.now()
  await deps.store.orgs.addMember(orgId, user.id, input.role, now, audit)
  return toMember({
    user_id: user.id,
    role: input.role,
    created_at: now,
    email: user.email,
    full_name: user.full_name,
  })
}

export async function updateMember(
  deps: Deps,
  principal: UserPrincipal,
  orgId: string,
  userId: string,
  input: { role: OrgRole },
  audit: AuditContext,
) {
  const access = await requireOrgRole(deps, principal, orgId, 'admin')
  return toMember(
    await deps.store.orgs.changeMemberRole(orgId, userId, input.role, access.role, deps.clock.now(), audit),
  )
}

/** Owners and admins remove members; anyone may leave. The last owner can do neither. */
export async function removeMember(
  deps: Deps,
  principal: UserPrincipal,
  orgId: string,
  userId: string,
  audit: AuditContext,
) {
  const self = userId === principal.user.id
  const access = await requireOrgRole(deps, principal, orgId, self ? 'viewer' : 'admin')
  await deps.store.orgs.removeMember(orgId, userId, self, access.role, deps.clock.now(), audit)
  return { id: userId, object: 'organization.member' as const, deleted: true }
}
