import { and, eq, gt, isNull, lt, or, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { SsoLoginRow, UserRow } from '../../db/schema'
import { takesLastSuperadmin } from '../../domain/admin-rules'
import {
  type AuditContext,
  identityLinked,
  ssoActors,
  ssoRoleChanged,
  ssoRoleRefused,
} from '../../domain/audit'
import { conflict } from '../../lib/errors'
import { SSO_LOGIN_KEPT_SECONDS, type SsoStore } from '../sso'
import { awaitingConfirmation } from '../statements'
import { appendAudit } from './audit'
import type { PgDb, PgTx } from './db'
import { isUniqueViolation } from './errors'

// Single sign-on on PostgreSQL, where several instances serve one sign-in (the callback may reach
// another instance than /start did): each claim is one conditional UPDATE, so a state or a
// one-time code works once across instances, and the identities' unique keys decide a race to link.

const { ssoLogins, userIdentities, users } = schema

export const identityConflict = () =>
  conflict(
    'identity_conflict',
    'This account is already linked to another identity at this provider, or this identity to another account',
  )

/**
 * The role OIDC_ADMIN_GROUPS decides, and its entry when it changes (docs/api.md §17). The last
 * active superadmin is never demoted by it (src/domain/admin-rules.ts): the role is kept, and the
 * refusal recorded. The account and every active superadmin are locked first, in the order
 * PATCH /v1/admin/users takes them: two demotions at once take turns, and the second counts what
 * the first left.
 */
async function setRole(
  tx: PgTx,
  userId: string,
  role: UserRow['platform_role'] | undefined,
  now: number,
  issuer: string,
  audit: AuditContext,
) {
  if (role === undefined) return
  const locked = await tx
    .select()
    .from(users)
    .where(or(eq(users.id, userId), and(eq(users.platform_role, 'superadmin'), eq(users.is_active, true))))
    .orderBy(users.seq)
    .for('no key update')
  const before = locked.find((u) => u.id === userId) as UserRow | undefined
  if (!before || before.platform_role === role) return
  const others = locked.filter(
    (u) => u.id !== userId && u.platform_role === 'superadmin' && u.is_active,
  ).length
  const actor = ssoActors(audit, userId).groups
  if (takesLastSuperadmin(before, { platform_role: role }, others)) {
    await appendAudit(tx, actor, ssoRoleRefused(userId, before.platform_role, role, issuer), now)
    return
  }
  await tx
    .update(users)
    .set({ platform_role: role, token_version: sql`${users.token_version} + 1`, updated_at: now })
    .where(and(eq(users.id, userId), sql`${users.platform_role} <> ${role}`))
  await appendAudit(tx, actor, ssoRoleChanged(userId, before.platform_role, role, issuer), now)
}

export function postgresSso(db: PgDb): SsoStore {
  return {
    async startLogin(login) {
      await db.delete(ssoLogins).where(lt(ssoLogins.expires_at, login.created_at - SSO_LOGIN_KEPT_SECONDS))
      await db.insert(ssoLogins).values(login)
    },

    async takeLogin(stateHash, browserHash, now) {
      const [row] = await db
        .update(ssoLogins)
        .set({ state_used_at: now })
        .where(
          and(
            eq(ssoLogins.state_hash, stateHash),
            eq(ssoLogins.browser_hash, browserHash),
            isNull(ssoLogins.state_used_at),
            gt(ssoLogins.expires_at, now),
          ),
        )
        .returning()
      return row as SsoLoginRow | undefined
    },

    async grantCode(stateHash, userId, code) {
      await db
        .update(ssoLogins)
        .set({ user_id: userId, code_hash: code?.hash ?? null, code_expires_at: code?.expires_at ?? null })
        .where(
          and(eq(ssoLogins.state_hash, stateHash), isNull(ssoLogins.user_id), isNull(ssoLogins.code_hash)),
        )
    },

    async confirmLogin(browserHash, code, now) {
      const [row] = await db
        .update(ssoLogins)
        .set({ code_hash: code.hash, code_expires_at: code.expires_at })
        .where(awaitingConfirmation(ssoLogins, browserHash, now))
        .returning()
      return row as SsoLoginRow | undefined
    },

    async cancelLogin(browserHash, now) {
      const [row] = await db
        .delete(ssoLogins)
        .where(awaitingConfirmation(ssoLogins, browserHash, now))
        .returning()
      return row as SsoLoginRow | undefined
    },

    async redeemCode(codeHash, now) {
      const [row] = await db
        .update(ssoLogins)
        .set({ code_used_at: now })
        .where(
          and(
            eq(ssoLogins.code_hash, codeHash),
            isNull(ssoLogins.code_used_at),
            gt(ssoLogins.code_expires_at, now),
          ),
        )
        .returning()
      return row as SsoLoginRow | undefined
    },

    async findLinkedUser(issuer, subject) {
      const [row] = await db
        .select({ user: users })
        .from(userIdentities)
        .innerJoin(users, eq(users.id, userIdentities.user_id))
        .where(and(eq(userIdentities.issuer, issuer), eq(userIdentities.subject, subject)))
      return row?.user as UserRow | undefined
    },

    async recordSignIn(issuer, subject, now, role, audit) {
      return db.transaction(async (tx) => {
        const [linked] = await tx
          .update(userIdentities)
          .set({ last_sign_in_at: now })
          .where(and(eq(userIdentities.issuer, issuer), eq(userIdentities.subject, subject)))
          .returning({ user_id: userIdentities.user_id })
        if (!linked) return undefined
        await setRole(tx, linked.user_id, role, now, issuer, audit)
        const [user] = await tx.select().from(users).where(eq(users.id, linked.user_id))
        return user as UserRow | undefined
      })
    },

    async link(userId, identity, now, role, audit) {
      try {
        return await db.transaction(async (tx) => {
          // The primary key (issuer, subject) and the unique (user_id, issuer) refuse a second link.
          await tx
            .insert(userIdentities)
            .values({ ...identity, user_id: userId, created_at: now, last_sign_in_at: now })
          await appendAudit(tx, ssoActors(audit, userId).user, [identityLinked(userId, identity)], now)
          await setRole(tx, userId, role, now, identity.issuer, audit)
          const [user] = await tx.select().from(users).where(eq(users.id, userId))
          return user as UserRow
        })
      } catch (error) {
        if (isUniqueViolation(error)) throw identityConflict()
        throw error
      }
    },

    async linkedSuperadmins(issuer) {
      return db
        .select({ user_id: users.id, email: userIdentities.email })
        .from(userIdentities)
        .innerJoin(users, eq(users.id, userIdentities.user_id))
        .where(
          and(
            eq(userIdentities.issuer, issuer),
            eq(users.platform_role, 'superadmin'),
            eq(users.is_active, true),
          ),
        )
    },
  }
}
