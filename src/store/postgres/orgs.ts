import { and, asc, count, desc, eq, inArray, isNull, ne } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { OrgRole, OrgRow } from '../../db/schema'
import { memberAdded, memberRemoved, memberRoleChanged, orgCreated, orgDeleted } from '../../domain/audit'
import { checkOrgDeletion, checkRemoval, checkRoleChange } from '../../domain/org-rules'
import { conflict } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { Member, OrgsStore } from '../orgs'
import { appendAudit } from './audit'
import type { PgDb, PgTx } from './db'
import { isUniqueViolation } from './errors'
import { pageBy, pageRows } from './page'

// Organizations and memberships on PostgreSQL. Every change of roles locks the org's row first
// (NO KEY UPDATE, so the org's workers registering meanwhile are not held up), so the last-owner
// rule counts owners no concurrent change can alter: two owners demoting each other at once take
// turns, and the second is refused.

const { apiKeys, organizations, memberships, users, workers } = schema

const memberColumns = {
  user_id: memberships.user_id,
  role: memberships.role,
  created_at: memberships.created_at,
  email: users.email,
  full_name: users.full_name,
}

const membership = (orgId: string, userId: string) =>
  and(eq(memberships.org_id, orgId), eq(memberships.user_id, userId))

async function lockOrgAndCountOtherOwners(tx: PgTx, orgId: string, userId: string) {
  await tx
    .select({ id: organizations.id })
    .from(organizations)
    .where(eq(organizations.id, orgId))
    .for('no key update')
  const [c] = await tx
    .select({ n: count() })
    .from(memberships)
    .where(and(eq(memberships.org_id, orgId), eq(memberships.role, 'owner'), ne(memberships.user_id, userId)))
  return c!.n
}

export function postgresOrgs(db: PgDb): OrgsStore {
  return {
    async findAccess(orgId, userId) {
      const [row] = await db
        .select({ org: organizations, role: memberships.role })
        .from(organizations)
        .leftJoin(memberships, and(eq(memberships.org_id, organizations.id), eq(memberships.user_id, userId)))
        .where(eq(organizations.id, orgId))
      return row as { org: OrgRow; role: OrgRole | null } | undefined
    },

    async listOrgsOf(userId, page) {
      const mine = eq(memberships.user_id, userId)
      return pageBy(
        page,
        organizations.seq,
        (id) =>
          db
            .select({ seq: organizations.seq })
            .from(organizations)
            .innerJoin(memberships, eq(memberships.org_id, organizations.id))
            .where(and(mine, eq(organizations.id, id))),
        (after, n) =>
          db
            .select({ org: organizations, role: memberships.role })
            .from(organizations)
            .innerJoin(memberships, eq(memberships.org_id, organizations.id))
            .where(and(mine, after))
            .orderBy(desc(organizations.seq))
            .limit(n),
      )
    },

    async listMembershipsOf(userId) {
      return db
        .select({
          org_id: memberships.org_id,
          org_name: organizations.name,
          role: memberships.role,
          personal: organizations.personal,
        })
        .from(memberships)
        .innerJoin(organizations, eq(organizations.id, memberships.org_id))
        .where(eq(memberships.user_id, userId))
        .orderBy(organizations.seq)
    },

    async createTeamOrg(name, ownerId, now, audit) {
      return db.transaction(async (tx) => {
        const [org] = await tx
          .insert(organizations)
          .values({ id: newId('org_'), name, personal: false, created_at: now })
          .returning()
        await tx
          .insert(memberships)
          .values({ org_id: org!.id, user_id: ownerId, role: 'owner', created_at: now })
        await appendAudit(tx, audit, [orgCreated(org!)], now)
        return org as OrgRow
      })
    },

    async deleteOrg(orgId, now, audit) {
      await db.transaction(async (tx) => {
        // FOR UPDATE conflicts with the KEY SHARE a registration's insert takes on the org: a worker
        // registered meanwhile is counted below, or its registration waits and finds no org.
        const [org] = (await tx
          .select()
          .from(organizations)
          .where(eq(organizations.id, orgId))
          .for('update')) as OrgRow[]
        const [held] = await tx.select({ n: count() }).from(workers).where(eq(workers.org_id, orgId))
        checkOrgDeletion(org, held!.n)
        const keys = await tx
          .select({ id: apiKeys.id, name: apiKeys.name, prefix: apiKeys.prefix })
          .from(apiKeys)
          .where(and(eq(apiKeys.org_id, orgId), isNull(apiKeys.revoked_at)))
        const members = (await tx
          .select({ user_id: memberships.user_id, role: memberships.role })
          .from(memberships)
          .where(eq(memberships.org_id, orgId))) as { user_id: string; role: OrgRole }[]
        // Its worker keys and memberships go with it (ON DELETE CASCADE).
        await tx.delete(organizations).where(eq(organizations.id, orgId))
        await appendAudit(tx, audit, [orgDeleted(org!, keys, members)], now)
      })
    },

    async listMembers(orgId) {
      return (
        db
          .select(memberColumns)
          .from(memberships)
          .innerJoin(users, eq(users.id, memberships.user_id))
          .where(eq(memberships.org_id, orgId))
          // Oldest member first; memberships has no insertion order here, so ties within one
          // second go to the older account.
          .orderBy(asc(memberships.created_at), asc(users.seq))
      )
    },

    async addMember(orgId, userId, role, now, audit) {
      try {
        await db.transaction(async (tx) => {
          await tx.insert(memberships).values({ org_id: orgId, user_id: userId, role, created_at: now })
          await appendAudit(tx, audit, [memberAdded(orgId, userId, role)], now)
        })
      } catch (error) {
        // The (org_id, user_id) primary key decides a race between two adds.
        if (isUniqueViolation(error))
          throw conflict('already_member', 'This user is already a member', 'email')
        throw error
      }
    },

    async changeMemberRole(orgId, userId, role, actorRole, now, audit): Promise<Member> {
      return db.transaction(async (tx) => {
        const otherOwners = await lockOrgAndCountOtherOwners(tx, orgId, userId)
        const [target] = await tx
          .select(memberColumns)
          .from(memberships)
          .innerJoin(users, eq(users.id, memberships.user_id))
          .where(membership(orgId, userId))
        const member = checkRoleChange(target, role, actorRole, otherOwners)
        await tx.update(memberships).set({ role }).where(membership(orgId, userId))
        await appendAudit(tx, audit, memberRoleChanged(orgId, userId, member.role, role), now)
        return { ...member, role }
      })
    },

    async removeMember(orgId, userId, self, actorRole, now, audit) {
      await db.transaction(async (tx) => {
        const otherOwners = await lockOrgAndCountOtherOwners(tx, orgId, userId)
        const [target] = await tx.select().from(memberships).where(membership(orgId, userId))
        checkRemoval(target, self, actorRole, otherOwners)
        await tx.delete(memberships).where(membership(orgId, userId))
        await appendAudit(tx, audit, [memberRemoved(orgId, userId, target.role, self)], now)
      })
    },

    async listAllOrgs(page) {
      const { rows, has_more } = await pageRows<OrgRow>(db, organizations, undefined, page)
      const counts = new Map<string, number>()
      if (rows.length) {
        for (const c of await db
          .select({ org_id: memberships.org_id, n: count() })
          .from(memberships)
          .where(
            inArray(
              memberships.org_id,
              rows.map((r) => r.id),
            ),
          )
          .groupBy(memberships.org_id))
          counts.set(c.org_id, c.n)
      }
      return { rows: rows.map((o) => ({ ...o, member_count: counts.get(o.id) ?? 0 })), has_more }
    },
  }
}
