import type { OrgRole, OrgRow } from '../db/schema'
import type { AuditContext } from '../domain/audit'
import type { PageParams, RowsPage } from '../lib/pagination'

// Organizations and memberships (docs/api.md §3, docs/api.md §3). The role checks and the last-owner rule live
// in modules/orgs/access.ts and src/domain/org-rules.ts; the engines apply them inside the transaction that
// changes memberships, so two concurrent changes can never leave an org without an owner. Every
// change writes its audit entry (docs/api.md §17) in that transaction.

export interface Member {
  user_id: string
  role: OrgRole
  created_at: number
  email: string
  full_name: string
}

export interface Membership {
  org_id: string
  org_name: string
  role: OrgRole
  personal: boolean
}

export interface OrgsStore {
  /** docs/api.md §1: the org and the user's role in it (null: not a member); undefined: no such org. */
  findAccess(orgId: string, userId: string): Promise<{ org: OrgRow; role: OrgRole | null } | undefined>
  /** GET /v1/orgs: the user's orgs with their role, newest first (docs/api.md §0 paging). */
  listOrgsOf(userId: string, page: PageParams): Promise<RowsPage<{ org: OrgRow; role: OrgRole }>>
  /** GET /v1/auth/me: every membership of the user, oldest org first. */
  listMembershipsOf(userId: string): Promise<Membership[]>
  /** POST /v1/orgs: a team org with `ownerId` as its owner. */
  createTeamOrg(name: string, ownerId: string, now: number, audit: AuditContext): Promise<OrgRow>
  /** GET …/members: oldest member first. */
  listMembers(orgId: string): Promise<Member[]>
  /** POST …/members: 409 `already_member` when the user already belongs to the org. */
  addMember(orgId: string, userId: string, role: OrgRole, now: number, audit: AuditContext): Promise<void>
  /**
   * PATCH …/members/{user_id} by a caller holding `actorRole`: 404 `member_not_found`, or the
   * owner and last-owner rules' 403/400 (src/domain/org-rules.ts), decided under the org's lock.
   */
  changeMemberRole(
    orgId: string,
    userId: string,
    role: OrgRole,
    actorRole: OrgRole,
    now: number,
    audit: AuditContext,
  ): Promise<Member>
  /** DELETE …/members/{user_id}: removal or leaving (`self`), under the same rules and lock. */
  removeMember(
    orgId: string,
    userId: string,
    self: boolean,
    actorRole: OrgRole,
    now: number,
    audit: AuditContext,
  ): Promise<void>
  /**
   * DELETE /v1/orgs/{org_id} (docs/api.md §3), under the org's lock: the 404 and 409s of
   * src/domain/org-rules.ts checkOrgDeletion, else the org, its worker keys and its memberships
   * deleted, with its `org.deleted` entry, in one transaction.
   */
  deleteOrg(orgId: string, now: number, audit: AuditContext): Promise<void>
  /** GET /v1/admin/organizations: every org with its member count, newest first. */
  listAllOrgs(page: PageParams): Promise<RowsPage<OrgRow & { member_count: number }>>
}
