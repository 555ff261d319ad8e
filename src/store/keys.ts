import type { ApiKeyRow } from '../db/schema'
import type { AuditContext } from '../domain/audit'
import { newId } from '../lib/ids'
import type { PageParams, RowsPage } from '../lib/pagination'

// API keys (docs/api.md §1–3): personal keys owned by a user, worker keys owned by an org. Raw keys
// never reach the store: the service generates them and hands over the hash and display prefix.
// Every change writes its audit entries (docs/api.md §17) in its own transaction.

export type KeyOwner = { type: 'personal'; userId: string } | { type: 'worker'; orgId: string }

/** What authentication reads of a key, on every keyed request (docs/api.md §1). */
export type KeyCredential = Pick<
  ApiKeyRow,
  'id' | 'key_type' | 'org_id' | 'user_id' | 'expires_at' | 'last_used_at' | 'revoked_at'
>

export interface NewKey {
  name: string
  prefix: string
  key_hash: string
  created_by: string
  created_at: number
  expires_at: number | null
}

/** A rotation's new key: name and expiry come from the key it replaces, or are given. */
export type Replacement = Omit<NewKey, 'name' | 'expires_at'>

export interface KeyChanges {
  name?: string
  expires_at?: number | null
  /** Revoking a revoked key keeps the first revocation time (DELETE is idempotent). */
  revoked_at?: number
}

/** The row of `owner`'s new key: a personal key names its user, a worker key its org. */
export function newKeyRow(owner: KeyOwner, key: NewKey) {
  return {
    id: newId('key_'),
    key_type: owner.type,
    org_id: owner.type === 'worker' ? owner.orgId : null,
    user_id: owner.type === 'personal' ? owner.userId : null,
    ...key,
  }
}

/** What an update writes on `current`: the fields given, and a revocation only of a live key. */
export function keyUpdate(current: Pick<ApiKeyRow, 'revoked_at'>, changes: KeyChanges): KeyChanges {
  return {
    ...(changes.name !== undefined ? { name: changes.name } : {}),
    ...(changes.expires_at !== undefined ? { expires_at: changes.expires_at } : {}),
    ...(changes.revoked_at !== undefined && current.revoked_at === null
      ? { revoked_at: changes.revoked_at }
      : {}),
  }
}

export interface KeysStore {
  /** The hottest read of the server: a keyed request's credential by the key's SHA-256. */
  findCredentialByKeyHash(keyHash: string): Promise<KeyCredential | undefined>
  /** Records a key's use (the caller keeps this to minute resolution). */
  recordKeyUse(keyId: string, now: number): Promise<void>
  /** POST …/api-keys: a new key of `owner`. */
  createKey(owner: KeyOwner, key: NewKey, audit: AuditContext): Promise<ApiKeyRow>
  /** GET …/api-keys: the owner's keys, newest first (docs/api.md §0 paging). */
  listKeys(owner: KeyOwner, page: PageParams): Promise<RowsPage<ApiKeyRow>>
  /** One key of `owner`; undefined for another owner's key or an unknown id. */
  findKey(owner: KeyOwner, keyId: string): Promise<ApiKeyRow | undefined>
  /**
   * PUT/DELETE …/api-keys/{id}: rename, set expiry, revoke; undefined when not the owner's. An
   * entry per thing that changed (`now`: their time).
   */
  updateKey(
    owner: KeyOwner,
    keyId: string,
    changes: KeyChanges,
    now: number,
    audit: AuditContext,
  ): Promise<ApiKeyRow | undefined>
  /**
   * docs/api.md §2/§3 rotation with key_id: revokes that key and issues its replacement with the same
   * name and expiry, once even when two rotations race (404, or the rotation rule's 400s).
   */
  rotateKey(
    owner: KeyOwner,
    keyId: string,
    replacement: Replacement,
    now: number,
    audit: AuditContext,
  ): Promise<ApiKeyRow>
  /** Rotation without key_id: revokes every active key of the owner and issues one named `default`. */
  rotateAllKeys(
    owner: KeyOwner,
    replacement: Replacement,
    now: number,
    audit: AuditContext,
  ): Promise<ApiKeyRow>
}
