import { and, count, eq, gt, isNull, lt, ne, sql } from 'drizzle-orm'
import { ssoLogins, type UserRow, userIdentities, users } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { takesLastSuperadmin } from '../../domain/admin-rules'
import {
  type AuditContext,
  identityLinked,
  ssoActors,
  ssoRoleChanged,
  ssoRoleRefused,
} from '../../domain/audit'
import { conflict } from '../../lib/errors'
import { type Identity, SSO_LOGIN_KEPT_SECONDS, type SsoStore } from '../sso'
import { awaitingConfirmation } from '../statements'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'

// Single sign-on on SQLite: each claim is one guarded UPDATE (ARCHITECTURE.md rule 7), so a state
// or a one-time code works once.

export const identityConflict = () =>
  conflict(
    'identity_conflict',
    'This account is already linked to another identity at this provider, or this identity to another account',
  )

/** Is the identity linked, or its account's issuer slot taken? (The engine's checks before inserting.) */
export function linkedAlready(tx: Tx, identity: Identity, userId?: string): boolean {
  const bySubject = tx
    .select({ user_id: userIdentities.user_id })
    .from(userIdentities)
    .where(and(eq(userIdentities.issuer, identity.issuer), eq(userIdentities.subject, identity.subject)))
    .get()
  if (bySubject) return true
  if (!userId) return false
  return !!tx
    .select({ user_id: userIdentities.user_id })
    .from(userIdentities)
    .where(and(eq(userIdentities.issuer, identity.issuer), eq(userIdentities.user_id, userId)))
    .get()
}

export function insertIdentity(tx: Tx, userId: string, identity: Identity, now: number) {
  tx.insert(userIdentities)
    .values({ ...identity, user_id: userId, created_at: now, last_sign_in_at: now })
    .run()
}

/**
 * The role OIDC_ADMIN_GROUPS decides, and its entry when it changes (docs/api.md §17). The last
 * active superadmin is never demoted by it (src/domain/admin-rules.ts): the role is kept, and the
 * refusal recorded.
 */
function setRole(
  tx: Tx,
  userId: string,
  role: UserRow['platform_role'] | undefined,
  now: number,
  issuer: string,
  audit: AuditContext,
) {
  if (role === undefined) return
  const before = tx.select().from(users).where(eq(users.id, userId)).get()
  if (!before || before.platform_role === role) return
  const others = tx
    .select({ n: count() })
    .from(users)
    .where(and(eq(users.platform_role, 'superadmin'), eq(users.is_active, true), ne(users.id, userId)))
    .get()!.n
  const actor = ssoActors(audit, userId).groups
  if (takesLastSuperadmin(before, { platform_role: role }, others)) {
    appendAudit(tx, actor, ssoRoleRefused(userId, before.platform_role, role, issuer), now)
    return
  }
  tx.update(users)
    .set({ platform_role: role, token_version: sql`${users.token_version} + 1`, updated_at: now })
    .where(and(eq(users.id, userId), sql`${users.platform_role} <> ${role}`))
    .run()
  appendAudit(tx, actor, ssoRoleChanged(userId, before.platform_role, role, issuer), now)
}

export function sqliteSso({ db }: SqliteDeps): SsoStore {
  return {
    async startLogin(login) {
      writeTx(db, (tx) => {
        tx.delete(ssoLogins)
          .where(lt(ssoLogins.expires_at, login.created_at - SSO_LOGIN_KEPT_SECONDS))
          .run()
        tx.insert(ssoLogins).values(login).run()
      })
    },

    async takeLogin(stateHash, browserHash, now) {
      return db
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
        .get()
    },

    async grantCode(stateHash, userId, code) {
      db.update(ssoLogins)
        .set({ user_id: userId, code_hash: code?.hash ?? null, code_expires_at: code?.expires_at ?? null })
        .where(
          and(eq(ssoLogins.state_hash, stateHash), isNull(ssoLogins.user_id), isNull(ssoLogins.code_hash)),
        )
        .run()
    },

    async confirmLogin(browserHash, code, now) {
      return db
        .update(ssoLogins)
        .set({ code_hash: code.hash, code_expires_at: code.expires_at })
        .where(awaitingConfirmation(ssoLogins, browserHash, now))
        .returning()
        .get()
    },

    async cancelLogin(browserHash, now) {
      return db
        .delete(ssoLogins)
        .where(awaitingConfirmation(ssoLogins, browserHash, now))
        .returning()
        .get()
    },

    async redeemCode(codeHash, now) {
      return db
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
        .get()
    },

    async findLinkedUser(issuer, subject) {
      const row = db
        .select({ user: users })
        .from(userIdentities)
        .innerJoin(users, eq(users.id, userIdentities.user_id))
        .where(and(eq(userIdentities.issuer, issuer), eq(userIdentities.subject, subject)))
        .get()
      return row?.user
    },

    async recordSignIn(issuer, subject, now, role, audit) {
      return writeTx(db, (tx) => {
        const linked = tx
          .update(userIdentities)
          .set({ last_sign_in_at: now })
          .where(and(eq(userIdentities.issuer, issuer), eq(userIdentities.subject, subject)))
          .returning({ user_id: userIdentities.user_id })
          .get()
        if (!linked) return undefined
        setRole(tx, linked.user_id, role, now, issuer, audit)
        return tx.select().from(users).where(eq(users.id, linked.user_id)).get()
      })
    },

    async link(userId, identity, now, role, audit) {
      return writeTx(db, (tx) => {
        if (linkedAlready(tx, identity, userId)) throw identityConflict()
        insertIdentity(tx, userId, identity, now)
        appendAudit(tx, ssoActors(audit, userId).user, [identityLinked(userId, identity)], now)
        setRole(tx, userId, role, now, identity.issuer, audit)
        return tx.select().from(users).where(eq(users.id, userId)).get()!
      })
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
        .all()
    },
  }
}
