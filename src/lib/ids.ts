// Opaque random ids with a type prefix (docs/api.md §0): never sequential, never guessable.

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** `n` characters of base62 drawn from the CSPRNG without modulo bias. */
export function randomBase62(n: number): string {
  let out = ''
  const buf = new Uint8Array(n * 2)
  while (out.length < n) {
    crypto.getRandomValues(buf)
    for (const b of buf) {
      // 248 = 62 * 4: bytes at or above it would favour the first characters.
      if (b < 248) out += ALPHABET[b % 62]
      if (out.length === n) break
    }
  }
  return out
}

export type IdPrefix =
  | 'user_'
  | 'shard_'
  | 'org_'
  | 'key_'
  | 'file-'
  | 'batch_'
  | 'wrk_'
  | 'asg_'
  | 'req_'
  | 'inst_'
  | 'wh_'
  | 'msg_'
  | 'whd_'
  | 'aud_'
  | 'join_'

export const newId = (prefix: IdPrefix) => prefix + randomBase62(24)
