import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { jwt } from '@elysiajs/jwt'
import { Elysia } from 'elysia'
import type { Clock } from './clock'
import { randomBase62 } from './ids'
import { log } from './logger'

// Login JWTs (docs/api.md §1): HS256 with claims sub, iat, exp, tv (the user's token version) and,
// for a session begun by single sign-on, sso: true (must_change_password holds back only the
// sessions of a password login).
// Signing and verification go through @elysiajs/jwt (jose underneath), which pins the algorithm to
// the key type: `alg: none` and tokens signed with another secret are refused.

export interface TokenClaims {
  sub: string
  tv: number
  exp: number
  /** The session began by single sign-on, not with a password. */
  sso: boolean
}

export interface Tokens {
  sign(
    userId: string,
    tokenVersion: number,
    how?: { sso: boolean },
  ): Promise<{ token: string; expiresIn: number }>
  /** The token's claims; a token verified before is answered without a promise. */
  verify(token: string): TokenClaims | null | Promise<TokenClaims | null>
}

/** Tokens whose signature was checked, kept per server (the same JWT comes with every request). */
const VERIFIED_KEPT = 10_000

export function createTokens(secret: string, ttlSeconds: number, clock: Clock): Tokens {
  const signer = new Elysia().use(jwt({ name: 'jwt', secret, alg: 'HS256' })).decorator.jwt
  // A token is only ever taken from here byte for byte as it was verified; its expiry is checked
  // against the clock at every use, as jose checks it (valid while exp > now).
  const verified = new Map<string, TokenClaims>()
  return {
    async sign(userId, tokenVersion, how) {
      const exp = clock.now() + ttlSeconds
      const token = await signer.sign({
        sub: userId,
        tv: tokenVersion,
        exp,
        ...(how?.sso ? { sso: true } : {}),
      })
      return { token, expiresIn: ttlSeconds }
    },
    verify(token) {
      const kept = verified.get(token)
      if (kept) {
        if (kept.exp > clock.now()) return kept
        verified.delete(token)
        return null
      }
      return verifySignature(token)
    },
  }

  async function verifySignature(token: string): Promise<TokenClaims | null> {
    // jose checks exp against the clock we pass, so tests can move time forward.
    const payload = await signer.verify(token, {
      algorithms: ['HS256'],
      currentDate: new Date(clock.nowMs()),
    })
    if (!payload || typeof payload.sub !== 'string' || typeof payload.tv !== 'number') return null
    if (typeof payload.exp !== 'number') return null
    const claims = { sub: payload.sub, tv: payload.tv, exp: payload.exp, sso: payload.sso === true }
    if (verified.size >= VERIFIED_KEPT) verified.delete(verified.keys().next().value!)
    verified.set(token, claims)
    return claims
  }
}

/** JWT_SECRET, or a secret generated once and kept in DATA_DIR/jwt-secret with mode 0600. */
export function resolveJwtSecret(configured: string | undefined, dataDir: string): string {
  if (configured) return configured
  const path = join(dataDir, 'jwt-secret')
  if (existsSync(path)) return readFileSync(path, 'utf8').trim()
  mkdirSync(dataDir, { recursive: true })
  const secret = randomBase62(64)
  writeFileSync(path, secret + '\n', { mode: 0o600 })
  chmodSync(path, 0o600)
  log.info('generated JWT secret', { file: path })
  return secret
}
