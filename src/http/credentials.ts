import type { UserRow } from '../db/schema'
import type { Deps } from '../deps'
import { ANONYMOUS, type Principal } from '../domain/principal'
import { unauthorized } from '../lib/errors'
import { KEY_PATTERN, sha256Hex } from '../lib/keys'
import type { TokenClaims } from '../lib/tokens'
import type { CredentialState } from './credential-cache'

// Turns an Authorization header into who is calling. Which callers each route accepts is decided
// by src/http/auth.ts; this only answers "who is this?" (docs/api.md §1), failing with 401 for anything
// missing its mark: malformed, unknown, expired, revoked, or belonging to a deactivated user.

const LAST_USED_RESOLUTION_SECONDS = 60

/** Who is calling; a JWT whose signature and user were seen a moment ago is answered without a promise. */
export function authenticate(
  deps: Deps & CredentialState,
  authorization: string | null | undefined,
): Principal | Promise<Principal> {
  if (!authorization) return ANONYMOUS
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
  if (!match) throw unauthorized('invalid_authorization', 'Authorization must be "Bearer <token>"')
  const token = match[1]!
  return token.startsWith('gk-') ? byKey(deps, token) : byJwt(deps, token)
}

async function byKey(deps: Deps & CredentialState, raw: string): Promise<Principal> {
  if (!KEY_PATTERN.test(raw)) throw unauthorized('invalid_api_key', 'Invalid API key')
  const now = deps.clock.now()
  const hash = sha256Hex(raw)
  const key = await deps.credentials.key(hash, now, () => deps.store.keys.findCredentialByKeyHash(hash))
  if (!key) throw unauthorized('invalid_api_key', 'Invalid API key')
  if (key.revoked_at !== null) throw unauthorized('api_key_revoked', 'This API key has been revoked')
  if (key.expires_at !== null && key.expires_at <= now)
    throw unauthorized('api_key_expired', 'This API key has expired')
  // Recorded at minute resolution: a heartbeat every few seconds must not mean a write each time.
  if (key.last_used_at === null || now - key.last_used_at >= LAST_USED_RESOLUTION_SECONDS) {
    await deps.store.keys.recordKeyUse(key.id, now)
    deps.credentials.keyUsed(hash, now)
  }
  if (key.key_type === 'worker') return { kind: 'worker', orgId: key.org_id!, keyId: key.id }
  const user = await findUser(deps, key.user_id!, now)
  if (!user?.is_active) throw unauthorized('invalid_api_key', 'Invalid API key')
  return { kind: 'user', via: 'personal_key', user, keyId: key.id }
}

function byJwt(deps: Deps & CredentialState, token: string): Principal | Promise<Principal> {
  const claims = deps.tokens.verify(token)
  return claims instanceof Promise ? claims.then((c) => jwtUser(deps, c)) : jwtUser(deps, claims)
}

function jwtUser(deps: Deps & CredentialState, claims: TokenClaims | null): Principal | Promise<Principal> {
  if (!claims) throw unauthorized('invalid_token', 'Invalid or expired token')
  const user = findUser(deps, claims.sub, deps.clock.now())
  return user instanceof Promise ? user.then((u) => jwtPrincipal(claims, u)) : jwtPrincipal(claims, user)
}

function jwtPrincipal(claims: TokenClaims, user: UserRow | undefined): Principal {
  if (!user?.is_active) throw unauthorized('invalid_token', 'Invalid or expired token')
  // A password change or reset bumps token_version: every JWT issued before it stops working.
  if (claims.tv !== user.token_version) throw unauthorized('token_revoked', 'This token is no longer valid')
  return { kind: 'user', via: 'jwt', user, keyId: null, ...(claims.sso ? { sso: true } : {}) }
}

/** The user behind a JWT or personal key, kept per server (credential-cache.ts). */
const findUser = (deps: Deps & CredentialState, userId: string, now: number) =>
  deps.credentials.user(userId, now, () => deps.store.accounts.findUserById(userId))
