import { and, eq, or, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { UserRow } from '../../db/schema'
import { checkLastSuperadmin } from '../../domain/admin-rules'
import { passwordChanged, passwordReset, userChanged, userCreated } from '../../domain/audit'
import { conflict } from '../../lib/errors'
import { type AccountsStore, type NewUser, newAccountRows } from '../accounts'
import type { Identity } from '../sso'
import { newPassword, redeemableToken, userChange } from '../statements'
import { appendAudit } from './audit'
import type { PgDb, PgTx } from './db'
import { isUniqueViolation, uniqueOn } from './errors'
import { pageRows } from './page'
import { identityConflict } from './sso'

// Users and reset tokens on PostgreSQL, where several instances write at once: the email's UNIQUE
// constraint decides a signup race (23505 → 409 email_taken), the superadmins' rows are locked
// before the last-superadmin rule counts them, and a reset token is claimed by one conditional
// UPDATE.

const { users, organizations, memberships, passwordResetTokens, userIdentities } = schema

async function storePassword(tx: PgTx, now: number, userId: string, hash: string) {
  const [row] = await tx
    .update(users)
    .set(newPassword(users, hash, now))
    .where(eq(users.id, userId))
    .returning()
  return row as UserRow | undefined
}

export function postgresAccounts(db: PgDb): AccountsStore {
  // Every JWT and personal-key request reads its user: the query is built once, not per request.
  const userById = db
    .select()
    .from(users)
    .where(eq(users.id, sql.placeholder('id')))
    .prepare('gk_user_by_id')
  return {
    async createUser(input: NewUser, personalOrgName: string, audit, identity?: Identity) {
      try {
        return await db.transaction(async (tx) => {
          const rows = newAccountRows(input, personalOrgName)
          const [user] = await tx.insert(users).values(rows.user).returning()
          await tx.insert(organizations).values(rows.org)
          await tx.insert(memberships).values(rows.membership)
          if (identity)
            await tx.insert(userIdentities).values({
              ...identity,
              user_id: user!.id,
              created_at: input.now,
              last_sign_in_at: input.now,
            })
          await appendAudit(tx, audit, [userCreated(user!, audit.actor, identity)], input.now)
          return user as UserRow
        })
      } catch (error) {
        if (isUniqueViolation(error))
          throw uniqueOn(error, 'user_identities')
            ? identityConflict()
            : conflict('email_taken', 'This email is already registered', 'email')
        throw error
      }
    },

    async findUserById(id) {
      const [row] = await userById.execute({ id })
      return row as UserRow | undefined
    },

    async findUserByEmail(email) {
      const [row] = await db.select().from(users).where(eq(users.email, email))
      return row as UserRow | undefined
    },

    async hasSuperadmin() {
      const [row] = await db
        .select({ id: users.id })
        .from(users)
        .where(eq(users.platform_role, 'superadmin'))
        .limit(1)
      return !!row
    },

    async listUsers(page) {
      return pageRows<UserRow>(db, users, undefined, page)
    },

    async updateUser(id, changes, now, audit) {
      return db.transaction(async (tx) => {
        // Lock every active superadmin (and the target) before counting: two admins demoting each
        // other at once take turns, and the second sees the first's change.
        const locked = await tx
          .select()
          .from(users)
          .where(or(eq(users.id, id), and(eq(users.platform_role, 'superadmin'), eq(users.is_active, true))))
          .orderBy(users.seq)
          .for('no key update')
        const target = locked.find((u) => u.id === id)
        if (!target) return undefined
        const others = locked.filter(
          (u) => u.id !== id && u.platform_role === 'superadmin' && u.is_active,
        ).length
        checkLastSuperadmin(target, changes, others)
        const [row] = await tx
          .update(users)
          .set(userChange(users, target, changes, now))
          .where(eq(users.id, id))
          .returning()
        await appendAudit(tx, audit, userChanged(target, row!), now)
        return row as UserRow
      })
    },

    async setPassword(userId, passwordHash, now, audit) {
      return db.transaction(async (tx) => {
        const user = await storePassword(tx, now, userId, passwordHash)
        if (user) await appendAudit(tx, audit, [passwordChanged(userId)], now)
        return user
      })
    },

    async addResetToken(token) {
      await db.insert(passwordResetTokens).values(token)
    },

    async redeemResetToken(tokenHash, passwordHash, now, audit) {
      return db.transaction(async (tx) => {
        // Single use: one conditional UPDATE claims the token; the password is set in the same
        // transaction.
        const [claimed] = await tx
          .update(passwordResetTokens)
          .set({ used_at: now })
          .where(redeemableToken(passwordResetTokens, users, tokenHash, now))
          .returning({ user_id: passwordResetTokens.user_id })
        if (!claimed) return undefined
        await storePassword(tx, now, claimed.user_id, passwordHash)
        await appendAudit(tx, audit, [passwordReset(claimed.user_id)], now)
        return claimed.user_id
      })
    },
  }
}
