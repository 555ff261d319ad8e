import { and, count, desc, eq, inArray, isNull, ne, sql } from 'drizzle-orm'
import { apiKeys, memberships, type OrgRow, organizations, users, workers } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { memberAdded, memberRemoved, memberRoleChanged, orgCreated, orgDeleted } from '../../domain/audit'
import { checkOrgDeletion, checkRemoval, checkRoleChange } from '../../domain/org-rules'
import { conflict } from '../../lib/errors'
import { newId } from '../../lib/ids'
import type { OrgsStore } from '../orgs'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'
import { pageBy, pageRows } from './page'

// Organizations and memberships on SQLite. BEGIN IMMEDIATE takes the one write lock first, so the
// last-owner rule is checked and applied with no other writer in between.

const memberColumns = {
  user_id: memberships.user_id,
  role: memberships.role,
  created_at: memberships.created_at,
  email: users.email,
  full_name: users.full_name,
}

const membership = (orgId: string, userId: string) =>
  and(eq(memberships.org_id, orgId), eq(memberships.user_id, userId))

function ownerCountExcept(tx: Tx, orgId: string, userId: string) {
  return tx
    .select({ n: count() })
    .from(memberships)
    .where(and(eq(memberships.org_id, orgId), eq(memberships.role, 'owner'), ne(memberships.user_id, userId)))
    .get()!.n
}

export function sqliteOrgs(deps: SqliteDeps): OrgsStore {
  const { db } = deps
  return {
    async findAccess(orgId, userId) {
      return db
        .select({ org: organizations, role: memberships.role })
        .from(organizations)
        .leftJoin(memberships, and(eq(memberships.org_id, organizations.id), eq(memberships.user_id, userId)))
        .where(eq(organizations.id, orgId))
        .get()
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
            .where(and(mine, eq(organizations.id, id)))
            .get(),
        (after, n) =>
          db
            .select({ org: organizations, role: memberships.role })
            .from(organizations)
            .innerJoin(memberships, eq(memberships.org_id, organizations.id))
            .where(and(mine, after))
            .orderBy(desc(organizations.seq))
            .limit(n)
            .all(),
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
        .all()
    },

    async createTeamOrg(name, ownerId, now, audit) {
      return writeTx(db, (tx) => {
        const org = tx
          .insert(organizations)
          .values({ id: newId('org_'), name, personal: false, created_at: now })
          .returning()
          .get()
        tx.insert(memberships)
          .values({ org_id: org.id, user_id: ownerId, role: 'owner', created_at: now })
          .run()
        appendAudit(tx, audit, [orgCreated(org)], now)
        return org
      })
    },

    async deleteOrg(orgId, now, audit) {
      writeTx(db, (tx) => {
        const org = tx.select().from(organizations).where(eq(organizations.id, orgId)).get()
        const held = tx.select({ n: count() }).from(workers).where(eq(workers.org_id, orgId)).get()!.n
        checkOrgDeletion(org, held)
        const keys = tx
          .select({ id: apiKeys.id, name: apiKeys.name, prefix: apiKeys.prefix })
          .from(apiKeys)
          .where(and(eq(apiKeys.org_id, orgId), isNull(apiKeys.revoked_at)))
          .all()
        const members = tx
          .select({ user_id: memberships.user_id, role: memberships.role })
          .from(memberships)
          .where(eq(memberships.org_id, orgId))
          .all()
        // Its worker keys and memberships go with it (ON DELETE CASCADE).
        tx.delete(organizations).where(eq(organizations.id, orgId)).run()
        appendAudit(tx, audit, [orgDeleted(org!, keys, members)], now)
      })
    },

    async listMembers(orgId) {
      return (
        db
          .select(memberColumns)
          .from(memberships)
          .innerJoin(users, eq(users.id, memberships.user_id))
          .where(eq(memberships.org_id, orgId))
          // Oldest member first; rowid breaks ties within one second.
          .orderBy(memberships.created_at, sql`memberships.rowid`)
          .all()
      )
    },

    async addMember(orgId, userId, role, now, audit) {
      writeTx(db, (tx) => {
        if (tx.select().from(memberships).where(membership(orgId, userId)).get())
          throw conflict('already_member', 'This user is already a member', 'email')
        tx.insert(memberships).values({ org_id: orgId, user_id: userId, role, created_at: now }).run()
        appendAudit(tx, audit, [memberAdded(orgId, userId, role)], now)
      })
    },

    async changeMemberRole(orgId, userId, role, actorRole, now, audit) {
      return writeTx(db, (tx) => {
        const target = tx
          .select(memberColumns)
          .from(memberships)
          .innerJoin(users, eq(users.id, memberships.user_id))
          .where(membership(orgId, userId))
          .get()
        const member = checkRoleChange(target, role, actorRole, ownerCountExcept(tx, orgId, userId))
        tx.update(memberships).set({ role }).where(membership(orgId, userId)).run()
        appendAudit(tx, audit, memberRoleChanged(orgId, userId, member.role, role), now)
        return { ...member, role }
      })
    },

    async removeMember(orgId, userId, self, actorRole, now, audit) {
      writeTx(db, (tx) => {
        const target = tx.select().from(memberships).where(membership(orgId, userId)).get()
        checkRemoval(target, self, actorRole, ownerCountExcept(tx, orgId, userId))
        tx.delete(memberships).where(membership(orgId, userId)).run()
        appendAudit(tx, audit, [memberRemoved(orgId, userId, target.role, self)], now)
      })
    },

    async listAllOrgs(page) {
      const { rows, has_more } = pageRows<OrgRow>(db, organizations, undefined, page)
      const counts = new Map<string, number>()
      if (rows.length) {
        for (const c of db
          .select({ org_id: memberships.org_id, n: count() })
          .from(memberships)
          .where(
            inArray(
              memberships.org_id,
              rows.map((r) => r.id),
            ),
          )
          .groupBy(memberships.org_id)
          .all())
          counts.set(c.org_id, c.n)
      }
      return { rows: rows.map((o) => ({ ...o, member_count: counts.get(o.id) ?? 0 })), has_more }
    },
  }
}
