import { eq, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import { type ApiKeyRow, apiKeys, type UserRow, users } from '../../db/schema'
import type { Deps } from '../../deps'
import { unauthorized } from '../../lib/errors'
import { KEY_PATTERN, sha256Hex } from '../../lib/keys'

// Turns an Authorization header into who is calling. Which callers each route accepts is decided
// by src/http/auth.ts; this only answers "who is this?" (API.md §1), failing with 401 for anything
// missing its mark: malformed, unknown, expired, revoked, or belonging to a deactivated user.

export type UserPrincipal = {
  kind: 'user'
  via: 'jwt' | 'personal_key'
  user: UserRow
  keyId: string | null
}
export type WorkerPrincipal = { kind: 'worker'; orgId: string; keyId: string }
export type AnonymousPrincipal = { kind: 'anonymous' }
export type Principal = UserPrincipal | WorkerPrincipal | AnonymousPrincipal

const LAST_USED_RESOLUTION_SECONDS = 60

// Prepared once per database: these run on every authenticated request.
function prepare(db: Deps['db']) {
  return {
    // Only what authentication reads, as raw SQL on the driver: every worker and keyed request
    // runs it, and drizzle's per-call mapping was a measurable share of a heartbeat.
    keyByHash: db.$client.prepare<
      Pick<
        ApiKeyRow,
        'id' | 'key_type' | 'org_id' | 'user_id' | 'expires_at' | 'last_used_at' | 'revoked_at'
      >,
      [string]
    >(
      `SELECT id, key_type, org_id, user_id, expires_at, last_used_at, revoked_at
         FROM api_keys WHERE key_hash = ?`,
    ),
    userById: db
      .select()
      .from(users)
      .where(eq(users.id, sql.placeholder('id')))
      .prepare(),
    touchKey: db
      .update(apiKeys)
      .set({ last_used_at: sql`${sql.placeholder('now')}` })
      .where(eq(apiKeys.id, sql.placeholder('id')))
      .prepare(),
  }
}
const stmts = preparedOnce(prepare)

export async function authenticate(deps: Deps, authorization: string | null | undefined): Promise<Principal> {
  if (!authorization) return { kind: 'anonymous' }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
  if (!match) throw unauthorized('invalid_authorization', 'Authorization must be "Bearer <token>"')
  const token = match[1]!
  return token.startsWith('gk-') ? byKey(deps, token) : byJwt(deps, token)
}

function byKey(deps: Deps, raw: string): Principal {
  if (!KEY_PATTERN.test(raw)) throw unauthorized('invalid_api_key', 'Invalid API key')
  const s = stmts(deps)
  const key = s.keyByHash.get(sha256Hex(raw))
  if (!key) throw unauthorized('invalid_api_key', 'Invalid API key')
  const now = deps.clock.now()
  if (key.revoked_at !== null) throw unauthorized('api_key_revoked', 'This API key has been revoked')
  if (key.expires_at !== null && key.expires_at <= now)
    throw unauthorized('api_key_expired', 'This API key has expired')
  // Recorded at minute resolution: a heartbeat every few seconds must not mean a write each time.
  if (key.last_used_at === null || now - key.last_used_at >= LAST_USED_RESOLUTION_SECONDS) {
    s.touchKey.run({ now, id: key.id })
  }
  if (key.key_type === 'worker') return { kind: 'worker', orgId: key.org_id!, keyId: key.id }
  const user = s.userById.get({ id: key.user_id! })
  if (!user?.is_active) throw unauthorized('invalid_api_key', 'Invalid API key')
  return { kind: 'user', via: 'personal_key', user, keyId: key.id }
}

async function byJwt(deps: Deps, token: string): Promise<Principal> {
  const claims = await deps.tokens.verify(token)
  if (!claims) throw unauthorized('invalid_token', 'Invalid or expired token')
  const user = stmts(deps).userById.get({ id: claims.sub })
  if (!user?.is_active) throw unauthorized('invalid_token', 'Invalid or expired token')
  // A password change or reset bumps token_version: every JWT issued before it stops working.
  if (claims.tv !== user.token_version) throw unauthorized('token_revoked', 'This token is no longer valid')
  return { kind: 'user', via: 'jwt', user, keyId: null }
}
