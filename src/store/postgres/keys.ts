import { and, eq, isNull, type SQL, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { ApiKeyRow } from '../../db/schema'
import { keyChanged, keyCreated, keyRegenerated } from '../../domain/audit'
import { checkRotatable } from '../../domain/key-rules'
import { type KeyOwner, type KeysStore, keyUpdate, type NewKey, newKeyRow } from '../keys'
import { keyOwnedBy } from '../statements'
import { appendAudit } from './audit'
import type { PgDb, PgTx } from './db'
import { pageRows } from './page'

// API keys on PostgreSQL. A change locks the key's row, so the first revocation time wins and its
// entry is written once; rotations lock their owner's row, so two racing rotations issue one live
// replacement.

const { apiKeys, users, organizations } = schema

/**
 * Rotations of one owner take turns: each sees the keys the one before it issued. NO KEY UPDATE:
 * the owner's other writes (files, batches, workers, whose foreign keys take KEY SHARE) go on.
 */
async function lockOwner(tx: PgTx, owner: KeyOwner) {
  if (owner.type === 'personal')
    await tx.select({ id: users.id }).from(users).where(eq(users.id, owner.userId)).for('no key update')
  else
    await tx
      .select({ id: organizations.id })
      .from(organizations)
      .where(eq(organizations.id, owner.orgId))
      .for('no key update')
}

const ownedBy = (owner: KeyOwner): SQL => keyOwnedBy(apiKeys, owner)

async function insertKey(tx: PgTx, owner: KeyOwner, key: NewKey): Promise<ApiKeyRow> {
  const [row] = await tx.insert(apiKeys).values(newKeyRow(owner, key)).returning()
  return row as ApiKeyRow
}

export function postgresKeys(db: PgDb): KeysStore {
  // The credential lookup of every keyed request: the query is built once, not per request.
  const keyByHash = db
    .select({
      id: apiKeys.id,
      key_type: apiKeys.key_type,
      org_id: apiKeys.org_id,
      user_id: apiKeys.user_id,
      expires_at: apiKeys.expires_at,
      last_used_at: apiKeys.last_used_at,
      revoked_at: apiKeys.revoked_at,
    })
    .from(apiKeys)
    .where(eq(apiKeys.key_hash, sql.placeholder('keyHash')))
    .prepare('gk_key_by_hash')
  const findKey = async (owner: KeyOwner, keyId: string) => {
    const [row] = await db
      .select()
      .from(apiKeys)
      .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
    return row as ApiKeyRow | undefined
  }
  return {
    async findCredentialByKeyHash(keyHash) {
      const [row] = await keyByHash.execute({ keyHash })
      return row
    },

    async recordKeyUse(keyId, now) {
      await db.update(apiKeys).set({ last_used_at: now }).where(eq(apiKeys.id, keyId))
    },

    async createKey(owner, key, audit) {
      return db.transaction(async (tx) => {
        const row = await insertKey(tx, owner, key)
        await appendAudit(tx, audit, [keyCreated(row)], key.created_at)
        return row
      })
    },

    async listKeys(owner, page) {
      return pageRows<ApiKeyRow>(db, apiKeys, ownedBy(owner), page)
    },

    findKey,

    async updateKey(owner, keyId, input, now, audit) {
      return db.transaction(async (tx) => {
        const [current] = await tx
          .select()
          .from(apiKeys)
          .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
          .for('no key update')
        if (!current) return undefined
        const changes = keyUpdate(current, input)
        if (Object.keys(changes).length === 0) return current as ApiKeyRow
        const [row] = await tx.update(apiKeys).set(changes).where(eq(apiKeys.id, keyId)).returning()
        await appendAudit(tx, audit, keyChanged(current as ApiKeyRow, row as ApiKeyRow), now)
        return row as ApiKeyRow
      })
    },

    async rotateKey(owner, keyId, replacement, now, audit) {
      return db.transaction(async (tx) => {
        await lockOwner(tx, owner)
        const [old] = await tx
          .select()
          .from(apiKeys)
          .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
        checkRotatable(old, now)
        await tx.update(apiKeys).set({ revoked_at: now }).where(eq(apiKeys.id, keyId))
        const row = await insertKey(tx, owner, { ...replacement, name: old.name, expires_at: old.expires_at })
        await appendAudit(tx, audit, [keyRegenerated(row, [{ id: keyId }])], now)
        return row
      })
    },

    async rotateAllKeys(owner, replacement, now, audit) {
      return db.transaction(async (tx) => {
        await lockOwner(tx, owner)
        const replaced = await tx
          .update(apiKeys)
          .set({ revoked_at: now })
          .where(and(ownedBy(owner), isNull(apiKeys.revoked_at)))
          .returning({ id: apiKeys.id })
        const row = await insertKey(tx, owner, { ...replacement, name: 'default', expires_at: null })
        await appendAudit(tx, audit, [keyRegenerated(row, replaced)], now)
        return row
      })
    },
  }
}
