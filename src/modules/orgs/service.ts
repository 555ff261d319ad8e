import { and, count, desc, eq, lt, ne, type SQL, sql } from 'drizzle-orm'
import { memberships, type OrgRole, organizations, users } from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { badRequest, conflict, forbidden, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { type PageParams, parseLimit, toPage } from '../../lib/pagination'
import type { UserPrincipal } from '../auth/credentials'
import { requireOrgRole } from './access'

// Organizations (SPEC §2, API.md §3): the caller's orgs, team orgs and their members. Roles:
// viewer < admin < owner; only an owner grants or removes `owner`; an org always keeps an owner.

const toOrg = (o: typeof organizations.$inferSelect, role: OrgRole) => ({
  id: o.id,
  object: 'organization' as const,
  name: o.name,
  personal: o.personal,
  role,
  created_at: o.created_at,
})

export function listMyOrgs(deps: Deps, principal: UserPrincipal, query: PageParams) {
  const limit = parseLimit(query.limit)
  const mine = eq(memberships.user_id, principal.user.id)
  let cursor: SQL | undefined
  if (query.after) {
    const c = deps.db
      .select({ seq: organizations.seq })
      .from(organizations)
      .innerJoin(memberships, eq(memberships.org_id, organizations.id))
      .where(and(mine, eq(organizations.id, query.after)))
      .get()
    if (!c) throw badRequest('invalid_cursor', 'Unknown cursor in "after"', 'after')
    cursor = lt(organizations.seq, c.seq)
  }
  const rows = deps.db
    .select({ org: organizations, role: memberships.role })
    .from(organizations)
    .innerJoin(memberships, eq(memberships.org_id, organizations.id))
    .where(and(mine, cursor))
    .orderBy(desc(organizations.seq))
    .limit(limit + 1)
    .all()
  return toPage(
    rows.slice(0, limit).map((r) => toOrg(r.org, r.role)),
    rows.length > limit,
  )
}

export function createTeamOrg(deps: Deps, principal: UserPrincipal, input: { name: string }) {
  const name = input.name.trim()
  if (!name) throw badRequest('invalid_value', 'name must not be blank', 'name')
  const now = deps.clock.now()
  return writeTx(deps.db, (tx) => {
    const org = tx
      .insert(organizations)
      .values({ id: newId('org_'), name, personal: false, created_at: now })
      .returning()
      .get()
    tx.insert(memberships)
      .values({ org_id: org.id, user_id: principal.user.id, role: 'owner', created_at: now })
      .run()
    return toOrg(org, 'owner')
  })
}

const toMember = (m: {
  user_id: string
  role: OrgRole
  created_at: number
  email: string
  full_name: string
}) => ({
  id: m.user_id,
  object: 'organization.member' as const,
  user_id: m.user_id,
  email: m.email,
  full_name: m.full_name,
  role: m.role,
  created_at: m.created_at,
})

const memberColumns = {
  user_id: memberships.user_id,
  role: memberships.role,
  created_at: memberships.created_at,
  email: users.email,
  full_name: users.full_name,
}

export function listMembers(deps: Deps, principal: UserPrincipal, orgId: string) {
  requireOrgRole(deps, principal, orgId, 'viewer')
  const rows = deps.db
    .select(memberColumns)
    .from(memberships)
    .innerJoin(users, eq(users.id, memberships.user_id))
    .where(eq(memberships.org_id, orgId))
    // Oldest member first; rowid breaks ties within one second.
    .orderBy(memberships.created_at, sql`memberships.rowid`)
    .all()
  return toPage(rows.map(toMember), false)
}

export function addMember(
  deps: Deps,
  principal: UserPrincipal,
  orgId: string,
  input: { email: string; role: OrgRole },
) {
  const access = requireOrgRole(deps, principal, orgId, 'admin')
  if (access.org.personal) throw badRequest('personal_org', 'A Personal Org has no other members')
  if (input.role === 'owner' && access.role !== 'owner')
    throw forbidden('insufficient_role', 'Only an owner may grant owner')
  const email = input.email.trim().toLowerCase()
  const user = deps.db.select().from(users).where(eq(users.email, email)).get()
  if (!user) throw notFound('user_not_found', 'No user with this email', 'email')
  const now = deps.clock.now()
  writeTx(deps.db, (tx) => {
    const existing = tx
      .select()
      .from(memberships)
      .where(and(eq(memberships.org_id, orgId), eq(memberships.user_id, user.id)))
      .get()
    if (existing) throw conflict('already_member', 'This user is already a member', 'email')
    tx.insert(memberships)
      .values({ org_id: orgId, user_id: user.id, role: input.role, created_at: now })
      .run()
  })
  return toMember({
    user_id: user.id,
    role: input.role,
    created_at: now,
    email: user.email,
    full_name: user.full_name,
  })
}

function ownerCountExcept(tx: Pick<Deps['db'], 'select'>, orgId: string, userId: string) {
  return tx
    .select({ n: count() })
    .from(memberships)
    .where(and(eq(memberships.org_id, orgId), eq(memberships.role, 'owner'), ne(memberships.user_id, userId)))
    .get()!.n
}

export function updateMember(
  deps: Deps,
  principal: UserPrincipal,
  orgId: string,
  userId: string,
  input: { role: OrgRole },
) {
  const access = requireOrgRole(deps, principal, orgId, 'admin')
  return writeTx(deps.db, (tx) => {
    const target = tx
      .select(memberColumns)
      .from(memberships)
      .innerJoin(users, eq(users.id, memberships.user_id))
      .where(and(eq(memberships.org_id, orgId), eq(memberships.user_id, userId)))
      .get()
    if (!target) throw notFound('member_not_found', 'No such member', 'user_id')
    const touchesOwner = target.role === 'owner' || input.role === 'owner'
    if (touchesOwner && access.role !== 'owner')
      throw forbidden('insufficient_role', 'Only an owner may grant or remove owner')
    if (target.role === 'owner' && input.role !== 'owner' && ownerCountExcept(tx, orgId, userId) === 0) {
      throw badRequest('last_owner', 'An organization must keep at least one owner')
    }
    tx.update(memberships)
      .set({ role: input.role })
      .where(and(eq(memberships.org_id, orgId), eq(memberships.user_id, userId)))
      .run()
    return toMember({ ...target, role: input.role })
  })
}

/** Owners and admins remove members; anyone may leave. The last owner can do neither. */
export function removeMember(deps: Deps, principal: UserPrincipal, orgId: string, userId: string) {
  const self = userId === principal.user.id
  const access = requireOrgRole(deps, principal, orgId, self ? 'viewer' : 'admin')
  writeTx(deps.db, (tx) => {
    const target = tx
      .select()
      .from(memberships)
      .where(and(eq(memberships.org_id, orgId), eq(memberships.user_id, userId)))
      .get()
    if (!target) throw notFound('member_not_found', 'No such member', 'user_id')
    if (target.role === 'owner' && !self && access.role !== 'owner') {
      throw forbidden('insufficient_role', 'Only an owner may remove an owner')
    }
    if (target.role === 'owner' && ownerCountExcept(tx, orgId, userId) === 0) {
      throw badRequest('last_owner', 'An organization must keep at least one owner')
    }
    tx.delete(memberships)
      .where(and(eq(memberships.org_id, orgId), eq(memberships.user_id, userId)))
      .run()
  })
  return { id: userId, object: 'organization.member' as const, deleted: true }
}
