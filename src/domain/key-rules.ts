import type { ApiKeyRow } from '../db/schema'
import { badRequest, notFound } from '../lib/errors'

// docs/api.md §2/§3 rotation with key_id, decided once for both engines on the key as locked by the
// rotating transaction.

export function checkRotatable<K extends Pick<ApiKeyRow, 'revoked_at' | 'expires_at'>>(
  old: K | undefined,
  now: number,
): asserts old is K {
  if (!old) throw notFound('api_key_not_found', 'No such API key', 'key_id')
  if (old.revoked_at !== null) throw badRequest('api_key_revoked', 'This key is already revoked', 'key_id')
  // "Same expiry": an expired key cannot be rotated into another born-expired key.
  if (old.expires_at !== null && old.expires_at <= now)
    throw badRequest('api_key_expired', 'This key has expired; create a new key instead', 'key_id')
}
