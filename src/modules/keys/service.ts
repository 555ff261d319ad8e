import type { Deps } from '../../deps'
import type { AuditContext } from '../../domain/audit'
import type { UserPrincipal } from '../../domain/principal'
import type { CredentialState } from '../../http/credential-cache'
import { credentialsChanged } from '../../http/credential-cache'
import { badRequest, notFound } from '../../lib/errors'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../../lib/keys'
import { log } from '../../lib/logger'
import { type PageParams, toPage } from '../../lib/pagination'
import type { KeyOwner, Replacement } from '../../store/keys'
import { type KeyRecord, toKeyRecord } from './model'

// Personal keys (owner: a user) and worker keys (owner: an org) share one implementation; only the
// owner column differs. Raw keys are returned once, stored as SHA-256. Revocation is a column the
// auth path reads on every request, so it takes effect on the very next one (no cache).

function checkExpiry(deps: Deps & CredentialState, expiresAt: number | null | undefined) {
  if (expiresAt != null && expiresAt <= deps.clock.now()) {
    throw badRequest('invalid_expiry', 'expires_at must be in the future', 'expires_at')
  }
}

/** A fresh raw key and what the store keeps of it: the hash and the display prefix. */
function newRawKey(
  deps: Deps & CredentialState,
  by: UserPrincipal,
): { raw: string; replacement: Replacement } {
  const raw = generateRawKey()
  return {
    raw,
    replacement: {
      prefix: keyDisplayPrefix(raw),
      key_hash: sha256Hex(raw),
      created_by: by.user.id,
      created_at: deps.clock.now(),
    },
  }
}

const rateLimit = (deps: Deps & CredentialState, by: UserPrincipal) =>
  deps.store.limits.take('keys', by.user.id, deps.config.RATE_LIMIT_KEYS_PER_MINUTE, 60)

export async function createKey(
  deps: Deps & CredentialState,
  owner: KeyOwner,
  by: UserPrincipal,
  input: { name?: string; expires_at?: number | null },
  audit: AuditContext,
): Promise<KeyRecord> {
  await rateLimit(deps, by)
  checkExpiry(deps, input.expires_at)
  const { raw, replacement } = newRawKey(deps, by)
  const row = await deps.store.keys.createKey(
    owner,
    { ...replacement, name: input.name ?? 'default', expires_at: input.expires_at ?? null },
    audit,
  )
  log.info('api key created', { key_id: row.id, key_type: owner.type, prefix: row.prefix, by: by.user.id })
  return toKeyRecord(row, raw)
}

export async function listKeys(deps: Deps & CredentialState, owner: KeyOwner, query: PageParams) {
  const { rows, has_more } = await deps.store.keys.listKeys(owner, query)
  return toPage(
    rows.map((r) => toKeyRecord(r)),
    has_more,
  )
}

const keyNotFound = () => notFound('api_key_not_found', 'No such API key', 'key_id')

export async function getKey(deps: Deps & CredentialState, owner: KeyOwner, keyId: string) {
  const row = await deps.store.keys.findKey(owner, keyId)
  if (!row) throw keyNotFound()
  return toKeyRecord(row)
}

export async function updateKey(
  deps: Deps & CredentialState,
  owner: KeyOwner,
  keyId: string,
  input: { name?: string; expires_at?: number | null; revoked?: true },
  audit: AuditContext,
): Promise<KeyRecord> {
  // Another owner's key is a 404 before any of the body is judged.
  if (!(await deps.store.keys.findKey(owner, keyId))) throw keyNotFound()
  checkExpiry(deps, input.expires_at)
  const now = deps.clock.now()
  const row = await deps.store.keys.updateKey(
    owner,
    keyId,
    { name: input.name, expires_at: input.expires_at, ...(input.revoked ? { revoked_at: now } : {}) },
    now,
    audit,
  )
  if (!row) throw keyNotFound()
  // A new expiry or a revocation holds from the next request, on every instance.
  credentialsChanged(deps, [keyId])
  if (input.revoked) log.info('api key revoked', { key_id: keyId, key_type: owner.type })
  return toKeyRecord(row)
}

/** Idempotent: revoking a revoked key returns it unchanged. */
export function revokeKey(
  deps: Deps & CredentialState,
  owner: KeyOwner,
  keyId: string,
  audit: AuditContext,
): Promise<KeyRecord> {
  return updateKey(deps, owner, keyId, { revoked: true }, audit)
}

/**
 * docs/api.md §2/§3 rotation: with `key_id`, that key is revoked and replaced by one with the same name
 * and expiry; without, every active key of the owner is revoked and one named `default` issued.
 */
export async function regenerateKey(
  deps: Deps & CredentialState,
  owner: KeyOwner,
  by: UserPrincipal,
  keyId: string | undefined,
  audit: AuditContext,
): Promise<KeyRecord> {
  await rateLimit(deps, by)
  const now = deps.clock.now()
  const { raw, replacement } = newRawKey(deps, by)
  const row = keyId
    ? await deps.store.keys.rotateKey(owner, keyId, replacement, now, audit)
    : await deps.store.keys.rotateAllKeys(owner, replacement, now, audit)
  // The replaced key, or every key of the owner, is revoked from the next request on.
  credentialsChanged(deps, [keyId ?? (owner.type === 'personal' ? owner.userId : owner.orgId)])
  log.info('api key regenerated', { key_id: row.id, replaced: keyId ?? 'all', key_type: owner.type })
  return toKeyRecord(row, raw)
}
