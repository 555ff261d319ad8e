import { createTokens } from '../../src/lib/tokens'
import type { TestApp } from './app'
import { rememberSecret } from './secrets'

// Forged and stale JWTs for the credential matrix.

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url')

/** A JWT with `alg: none` and no signature. */
export function unsignedJwt(userId: string, exp: number) {
  const token = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ sub: userId, tv: 0, exp })}.`
  rememberSecret(token)
  return token
}

/** A well-formed HS256 JWT signed with a secret the server does not know. */
export async function foreignJwt(t: Pick<TestApp, 'clock' | 'config'>, userId: string) {
  const { token } = await createTokens('another-secret-another-secret-0123456789', 3600, t.clock).sign(
    userId,
    0,
  )
  rememberSecret(token)
  return token
}

/** A JWT signed with the server's secret that expired an hour ago. */
export async function expiredJwt(t: Pick<TestApp, 'clock' | 'config'>, userId: string) {
  const past = {
    now: () => t.clock.now() - 2 * 86400,
    nowMs: () => t.clock.nowMs() - 2 * 86400_000,
    monotonicMs: () => t.clock.monotonicMs(),
  }
  const { token } = await createTokens(t.config.JWT_SECRET!, 3600, past).sign(userId, 0)
  rememberSecret(token)
  return token
}
