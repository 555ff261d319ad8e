import { and, count, eq, ne, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { memberships, organizations, passwordResetTokens, type UserRow, users } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { checkLastSuperadmin } from '../../domain/admin-rules'
import { passwordChanged, passwordReset, userChanged, userCreated } from '../../domain/audit'
import { conflict } from '../../lib/errors'
import { type AccountsStore, type NewUser, newAccountRows } from '../accounts'
import type { Identity } from '../sso'
import { newPassword, redeemableToken, userChange } from '../statements'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'
import { pageRows } from './page'
import { identityConflict, insertIdentity, linkedAlready } from './sso'

// Users and reset tokens on SQLite: synchronous BEGIN IMMEDIATE bodies (ARCHITECTURE.md rule 8).

const stmts = preparedOnce((db: SqliteDeps['db']) => ({
  // Every JWT and personal-key request reads its user: prepared once per database.
  userById: db
    .select()
    .from(users)
    .where(eq(users.id, sql.placeholder('id')))
    .prepare(),
}))

/** A new password for the user (statements.ts newPassword). */
function storePassword(tx: Tx, now: number, userId: string, hash: string) {
  return tx
    .update(users)
    .set(newPassword(users, hash, now))
    .where(eq(users.id, userId))
    .returning()
    .get()
}

export function sqliteAccounts(deps: SqliteDeps): AccountsStore {
  const { db } = deps
  return {
    async createUser(input: NewUser, personalOrgName: string, audit, identity?: Identity) {
      return writeTx(db, (tx) => {
        if (tx.select({ id: users.id }).from(users).where(eq(users.email, input.email)).get()) {
          throw conflict('email_taken', 'This email is already registered', 'email')
        }
        if (identity && linkedAlready(tx, identity)) throw identityConflict()
        const rows = newAccountRows(input, personalOrgName)
        const user = tx.insert(users).values(rows.user).returning().get()
        tx.insert(organizations).values(rows.org).run()
        tx.insert(memberships).values(rows.membership).run()
        if (identity) insertIdentity(tx, user.id, identity, input.now)
        appendAudit(tx, audit, [userCreated(user, audit.actor, identity)], input.now)
        return user
      })
    },

    async findUserById(id) {
      return stmts(deps).userById.get({ id })
    },

    async findUserByEmail(email) {
      return db.select().from(users).where(eq(users.email, email)).get()
    },

    async hasSuperadmin() {
      return !!db.select({ id: users.id }).from(users).where(eq(users.platform_role, 'superadmin')).get()
    },

    async listUsers(page) {
      return pageRows<UserRow>(db, users, undefined, page)
    },

    async updateUser(id, changes, now, audit) {
      return writeTx(db, (tx) => {
        const target = tx.select().from(users).where(eq(users.id, id)).get()
        if (!target) return undefined
        const others = tx
          .select({ n: count() })
          .from(users)
          .where(and(eq(users.platform_role, 'superadmin'), eq(users.is_active, true), ne(users.id, id)))
          .get()!.n
        checkLastSuperadmin(target, changes, others)
        const updated = tx
          .update(users)
          .set(userChange(users, target, changes, now))
          .where(eq(users.id, id))
          .returning()
          .get()
        appendAudit(tx, audit, userChanged(target, updated), now)
        return updated
      })
    },

    async setPassword(userId, passwordHash, now, audit) {
      return writeTx(db, (tx) => {
        const user = storePassword(tx, now, userId, passwordHash)
        if (user) appendAudit(tx, audit, [passwordChanged(userId)], now)
        return user
      })
    },

    async addResetToken(token) {
      db.insert(passwordResetTokens).values(token).run()
    },

    async redeemResetToken(tokenHash, passwordHash, now, audit) {
      return writeTx(db, (tx) => {
        // Single use: claiming the token and setting the password happen in one transaction.
        const claimed = tx
          .update(passwordResetTokens)
          .set({ used_at: now })
          .where(redeemableToken(passwordResetTokens, users, tokenHash, now))
          .returning({ user_id: passwordResetTokens.user_id })
          .get()
        if (!claimed) return undefined
        storePassword(tx, now, claimed.user_id, passwordHash)
        appendAudit(tx, audit, [passwordReset(claimed.user_id)], now)
        return claimed.user_id
      })
    },
  }
}
