import { and, eq, isNull, type SQL } from 'drizzle-orm'
import { type ApiKeyRow, apiKeys } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../../lib/keys'
import { log } from '../../lib/logger'
import { type PageParams, pageRows, toPage } from '../../lib/pagination'
import type { UserPrincipal } from '../auth/credentials'
import { type KeyRecord, toKeyRecord } from './model'

// Personal keys (owner: a user) and worker keys (owner: an org) share one implementation; only the
// owner column differs. Raw keys are returned once, stored as SHA-256. Revocation is a column the
// auth path reads on every request, so it takes effect on the very next one (no cache).

export type KeyOwner = { type: 'personal'; userId: string } | { type: 'worker'; orgId: string }

const ownedBy = (owner: KeyOwner): SQL =>
  owner.type === 'personal'
    ? and(eq(apiKeys.key_type, 'personal'), eq(apiKeys.user_id, owner.userId))!
    : and(eq(apiKeys.key_type, 'worker'), eq(apiKeys.org_id, owner.orgId))!

function checkExpiry(deps: Deps, expiresAt: number | null | undefined) {
  if (expiresAt != null && expiresAt <= deps.clock.now()) {
    throw badRequest('invalid_expiry', 'expires_at must be in the future', 'expires_at')
  }
}

function insertKey(
  tx: Tx,
  deps: Deps,
  owner: KeyOwner,
  by: UserPrincipal,
  name: string,
  expiresAt: number | null,
) {
  const raw = generateRawKey()
  const row = tx
    .insert(apiKeys)
    .values({
      id: newId('key_'),
      key_type: owner.type,
      name,
      prefix: keyDisplayPrefix(raw),
      key_hash: sha256Hex(raw),
      org_id: owner.type === 'worker' ? owner.orgId : null,
      user_id: owner.type === 'personal' ? owner.userId : null,
      created_by: by.user.id,
      created_at: deps.clock.now(),
      expires_at: expiresAt,
    })
    .returning()
    .get()
  return toKeyRecord(row, raw)
}

const rateLimit = (deps: Deps, by: UserPrincipal) =>
  deps.limiter.take('keys', by.user.id, deps.config.RATE_LIMIT_KEYS_PER_MINUTE, 60)

export function createKey(
  deps: Deps,
  owner: KeyOwner,
  by: UserPrincipal,
  input: { name?: string; expires_at?: number | null },
): KeyRecord {
  rateLimit(deps, by)
  checkExpiry(deps, input.expires_at)
  const record = writeTx(deps.db, (tx) =>
    insertKey(tx, deps, owner, by, input.name ?? 'default', input.expires_at ?? null),
  )
  log.info('api key created', {
    key_id: record.id,
    key_type: owner.type,
    prefix: record.prefix,
    by: by.user.id,
  })
  return record
}

export function listKeys(deps: Deps, owner: KeyOwner, query: PageParams) {
  const { rows, has_more } = pageRows<ApiKeyRow>(deps.db, apiKeys, ownedBy(owner), query)
  return toPage(
    rows.map((r) => toKeyRecord(r)),
    has_more,
  )
}

function findKey(deps: Deps, owner: KeyOwner, keyId: string): ApiKeyRow {
  const row = deps.db
    .select()
    .from(apiKeys)
    .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
    .get()
  if (!row) throw notFound('api_key_not_found', 'No such API key', 'key_id')
  return row
}

export function getKey(deps: Deps, owner: KeyOwner, keyId: string) {
  return toKeyRecord(findKey(deps, owner, keyId))
}

export function updateKey(
  deps: Deps,
  owner: KeyOwner,
  keyId: string,
  input: { name?: string; expires_at?: number | null; revoked?: true },
): KeyRecord {
  findKey(deps, owner, keyId)
  checkExpiry(deps, input.expires_at)
  const now = deps.clock.now()
  const row = writeTx(deps.db, (tx) => {
    const current = tx.select().from(apiKeys).where(eq(apiKeys.id, keyId)).get()!
    const changes = {
      ...(input.name !== undefined ? { name: input.name } : {}),
      ...(input.expires_at !== undefined ? { expires_at: input.expires_at } : {}),
      // Revoking twice keeps the first revocation time (DELETE is idempotent).
      ...(input.revoked && current.revoked_at === null ? { revoked_at: now } : {}),
    }
    if (Object.keys(changes).length === 0) return current
    return tx.update(apiKeys).set(changes).where(eq(apiKeys.id, keyId)).returning().get()
  })
  if (input.revoked) log.info('api key revoked', { key_id: keyId, key_type: owner.type })
  return toKeyRecord(row)
}

/** Idempotent: revoking a revoked key returns it unchanged. */
export function revokeKey(deps: Deps, owner: KeyOwner, keyId: string): KeyRecord {
  return updateKey(deps, owner, keyId, { revoked: true })
}

/**
 * API.md §2/§3 rotation: with `key_id`, that key is revoked and replaced by one with the same name
 * and expiry; without, every active key of the owner is revoked and one named `default` issued.
 */
export function regenerateKey(deps: Deps, owner: KeyOwner, by: UserPrincipal, keyId?: string): KeyRecord {
  rateLimit(deps, by)
  const now = deps.clock.now()
  const record = writeTx(deps.db, (tx) => {
    if (keyId) {
      const old = tx
        .select()
        .from(apiKeys)
        .where(and(ownedBy(owner), eq(apiKeys.id, keyId)))
        .get()
      if (!old) throw notFound('api_key_not_found', 'No such API key', 'key_id')
      if (old.revoked_at !== null)
        throw badRequest('api_key_revoked', 'This key is already revoked', 'key_id')
      // "Same expiry": an expired key cannot be rotated into another born-expired key.
      if (old.expires_at !== null && old.expires_at <= now) {
        throw badRequest('api_key_expired', 'This key has expired; create a new key instead', 'key_id')
      }
      tx.update(apiKeys).set({ revoked_at: now }).where(eq(apiKeys.id, old.id)).run()
      return insertKey(tx, deps, owner, by, old.name, old.expires_at)
    }
    tx.update(apiKeys)
      .set({ revoked_at: now })
      .where(and(ownedBy(owner), isNull(apiKeys.revoked_at)))
      .run()
    return insertKey(tx, deps, owner, by, 'default', null)
  })
  log.info('api key regenerated', { key_id: record.id, replaced: keyId ?? 'all', key_type: owner.type })
  return record
}
