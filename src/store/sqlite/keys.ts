import { and, eq, isNull, type SQL, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { type ApiKeyRow, apiKeys } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { keyChanged, keyCreated, keyRegenerated } from '../../domain/audit'
import { checkRotatable } from '../../domain/key-rules'
import { type KeyCredential, type KeyOwner, type KeysStore, keyUpdate, type NewKey, newKeyRow } from '../keys'
import { keyOwnedBy } from '../statements'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'
import { pageRows } from './page'

// API keys on SQLite. The credential lookup runs on every keyed request: prepared once per database.

const stmts = preparedOnce((db: SqliteDeps['db']) => ({
  // Only what authentication reads, as raw SQL on the driver: every worker and keyed request
  // runs it, and drizzle's per-call mapping was a measurable share of a heartbeat.
  keyByHash: db.$client.prepare<KeyCredential, [string]>(
    `SELECT id, key_type, org_id, user_id, expires_at, last_used_at, revoked_at
       FROM api_keys WHERE key_hash = ?`,
  ),
  touchKey: db
    .update(apiKeys)
    .set({ last_used_at: sql`${sql.placeholder('now')}` })
    .where(eq(apiKeys.id, sql.placeholder('id')))
    .prepare(),
}))

const ownedBy = (owner: KeyOwner): SQL => keyOwnedBy(apiKeys, owner)

function insertKey(tx: Tx, owner: KeyOwner, key: NewKey): ApiKeyRow {
  return tx.insert(apiKeys).values(newKeyRow(owner, key)).returning().get()
}

export function sqliteKeys(deps: SqliteDeps): KeysStore {
  const { db } = deps
  return {
    async findCredentialByKeyHash(keyHash) {
      return stmts(deps).keyByHash.get(keyHash) ?? undefined
    },

    async recordKeyUse(keyId, now) {
      stmts(deps).touchKey.run({ now, id: keyId })
    },

    async createKey(owner, key, audit) {
      return writeTx(db, (tx) => {
        const row = insertKey(tx, owner, key)
        appendAudit(tx, audit, [keyCreated(row)], key.created_at)
        return row
      })
    },

    async listKeys(owner, page) {
      return pageRows<ApiKeyRow>(db, apiKeys, ownedBy(owner), page)
    },

    async findKey(owner, keyId) {
      return db
        .select()
        .from(apiKeys)
        .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
        .get()
    },

    async updateKey(owner, keyId, input, now, audit) {
      return writeTx(db, (tx) => {
        const current = tx
          .select()
          .from(apiKeys)
          .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
          .get()
        if (!current) return undefined
        const changes = keyUpdate(current, input)
        if (Object.keys(changes).length === 0) return current
        const updated = tx.update(apiKeys).set(changes).where(eq(apiKeys.id, keyId)).returning().get()
        appendAudit(tx, audit, keyChanged(current, updated), now)
        return updated
      })
    },

    async rotateKey(owner, keyId, replacement, now, audit) {
      return writeTx(db, (tx) => {
        const old = tx
          .select()
          .from(apiKeys)
          .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
          .get()
        checkRotatable(old, now)
        tx.update(apiKeys).set({ revoked_at: now }).where(eq(apiKeys.id, keyId)).run()
        const row = insertKey(tx, owner, { ...replacement, name: old.name, expires_at: old.expires_at })
        appendAudit(tx, audit, [keyRegenerated(row, [{ id: keyId }])], now)
        return row
      })
    },

    async rotateAllKeys(owner, replacement, now, audit) {
      return writeTx(db, (tx) => {
        const replaced = tx
          .update(apiKeys)
          .set({ revoked_at: now })
          .where(and(ownedBy(owner), isNull(apiKeys.revoked_at)))
          .returning({ id: apiKeys.id })
          .all()
        const row = insertKey(tx, owner, { ...replacement, name: 'default', expires_at: null })
        appendAudit(tx, audit, [keyRegenerated(row, replaced)], now)
        return row
      })
    },
  }
}
