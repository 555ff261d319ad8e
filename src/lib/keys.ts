import { timingSafeEqual } from 'node:crypto'
import { randomBase62 } from './ids'

// API keys (docs/api.md §1): raw `gk-` + 40 base62, stored as SHA-256 only, listed by a 12-char prefix.
// A key has ~238 bits of entropy, so an unsalted fast hash is the right tool: nothing to brute force.

export const KEY_PREFIX = 'gk-'
export const KEY_PATTERN = /^gk-[0-9A-Za-z]{40}$/

export const generateRawKey = () => KEY_PREFIX + randomBase62(40)
// Bun's one-shot SHA-256 is ~5× faster than node:crypto's createHash; every keyed request hashes once.
export const sha256Hex = (value: string) => Bun.SHA256.hash(value, 'hex') as string
export const keyDisplayPrefix = (raw: string) => raw.slice(0, 12)

/** 32 random bytes, base64url: the password reset token of docs/api.md §2. */
export const generateResetToken = () =>
  Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url')

export function constantTimeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a)
  const bb = Buffer.from(b)
  return ab.length === bb.length && timingSafeEqual(ab, bb)
}
