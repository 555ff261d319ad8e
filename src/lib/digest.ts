// docs/api.md §4: a digest is 64 lowercase hex characters; an optional `sha256:` prefix is accepted
// anywhere and stripped, and comparisons are case-insensitive. Stored and compared normalized.

const HEX64 = /^[0-9a-f]{64}$/

/** The normalized digest, or null when `value` is not a sha256 digest in any accepted spelling. */
export function normalizeDigest(value: string): string | null {
  const hex = value
    .trim()
    .replace(/^sha256:/i, '')
    .toLowerCase()
  return HEX64.test(hex) ? hex : null
}

/** Lenient form for reported values (inventory, worker rows): anything unusable counts as absent. */
export const digestOrNull = (value: string | null | undefined): string | null =>
  typeof value === 'string' ? normalizeDigest(value) : null
