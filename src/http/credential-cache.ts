import type { UserRow } from '../db/schema'
import type { Deps } from '../deps'
import { log } from '../lib/logger'
import type { KeyCredential } from '../store/keys'

// The credentials of docs/api.md §1 kept in memory per server (deps.credentials), so that a request
// whose key or user was seen a moment ago costs no database read: key hash → the key's credential,
// user id → the user row that a JWT or personal key resolves to. Dropped exactly, here and through
// the signals bridge (src/services/signals.ts) on every other instance, by the writes that can
// change an answer (credentialsChanged): a key updated, revoked or rotated, a user activated,
// deactivated or given another platform role, a password changed or reset (token_version), an org
// deleted (its worker keys, forgotten by the org's id). There is no delete of users, and memberships
// are not part of a credential.
// Unknown keys and users are never kept: a key or user created later is found at its first use.

/**
 * The longest an entry is used. On PostgreSQL a signal is a hint (docs/api.md §12): a lost one delays
 * another instance's revocation here by at most this. It also bounds a change made to a SQLite
 * database by another process (the CLI).
 */
export const CREDENTIAL_MAX_AGE_SECONDS = 5
/** Entries kept per map; the oldest kept goes first when full. */
export const CREDENTIALS_KEPT = 10_000

interface Entry<T> {
  value: T
  until: number
}

export class CredentialCache {
  readonly #keys = new Map<string, Entry<KeyCredential>>()
  readonly #users = new Map<string, Entry<UserRow>>()
  /**
   * Bumped by every forget: a read that began before a change and ends after it is not kept (it
   * may have seen the row as it was).
   */
  #generation = 0

  get size() {
    return { keys: this.#keys.size, users: this.#users.size }
  }

  /** The key with this SHA-256, from memory or `read` (a store lookup). */
  key(keyHash: string, now: number, read: () => Promise<KeyCredential | undefined>) {
    return this.#through(this.#keys, keyHash, now, read)
  }

  /** A kept key's use was recorded (at minute resolution: http/credentials.ts). */
  keyUsed(keyHash: string, now: number) {
    const kept = this.#keys.get(keyHash)
    if (kept) kept.value = Object.freeze({ ...kept.value, last_used_at: now })
  }

  /** The user with this id, from memory or `read` (a store lookup). */
  user(userId: string, now: number, read: () => Promise<UserRow | undefined>) {
    return this.#through(this.#users, userId, now, read)
  }

  /**
   * Forgets every entry naming one of `ids`: a user by its id; a key by its own id, or by the id
   * of its owner (a user or an org: ids carry their kind's prefix, so one set serves all three).
   */
  forget(ids: readonly string[]) {
    this.#generation++
    const named = new Set(ids)
    for (const id of named) this.#users.delete(id)
    for (const [hash, { value: k }] of this.#keys) {
      if (
        named.has(k.id) ||
        (k.user_id !== null && named.has(k.user_id)) ||
        (k.org_id !== null && named.has(k.org_id))
      )
        this.#keys.delete(hash)
    }
  }

  /** A kept entry is answered as it is, without a promise (every request of a known caller). */
  #through<T extends object>(
    map: Map<string, Entry<T>>,
    id: string,
    now: number,
    read: () => Promise<T | undefined>,
  ): T | Promise<T | undefined> {
    const kept = map.get(id)
    if (kept) {
      if (now < kept.until) return kept.value
      map.delete(id)
    }
    return this.#read(map, id, now, read)
  }

  async #read<T extends object>(
    map: Map<string, Entry<T>>,
    id: string,
    now: number,
    read: () => Promise<T | undefined>,
  ): Promise<T | undefined> {
    const generation = this.#generation
    const value = await read()
    if (value !== undefined && generation === this.#generation) {
      if (map.size >= CREDENTIALS_KEPT) map.delete(map.keys().next().value!)
      // Shared by every request that finds it: frozen, so no handler can change another's view.
      map.set(id, { value: Object.freeze(value), until: now + CREDENTIAL_MAX_AGE_SECONDS })
    }
    return value
  }
}

/** What this server keeps of the credentials, made by src/compose.ts (ARCHITECTURE.md rule 2). */
export interface CredentialState {
  credentials: CredentialCache
}

/** Forgets what `ids` name here and on the other instances (src/services/signals.ts). */
export function credentialsChanged(deps: Deps & CredentialState, ids: string[]) {
  deps.credentials.forget(ids)
  deps.store.signals
    .publish({ kind: 'credentials_changed', ids })
    .catch((e) => log.warn('credentials signal not sent', { error: e }))
}
