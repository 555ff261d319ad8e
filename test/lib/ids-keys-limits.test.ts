import { describe, expect, test } from 'bun:test'
import { newId, randomBase62 } from '../../src/lib/ids'
import {
  generateRawKey,
  generateResetToken,
  KEY_PATTERN,
  keyDisplayPrefix,
  sha256Hex,
} from '../../src/lib/keys'

describe('ids and keys', () => {
  test('ids carry their type prefix and 24 random base62 characters, never repeating', () => {
    const ids = new Set(Array.from({ length: 2000 }, () => newId('batch_')))
    expect(ids.size).toBe(2000)
    for (const id of ids) expect(id).toMatch(/^batch_[0-9A-Za-z]{24}$/)
    expect(newId('file-')).toMatch(/^file-[0-9A-Za-z]{24}$/)
  })

  test('base62 characters are spread evenly (no modulo bias)', () => {
    const counts = new Map<string, number>()
    for (const c of randomBase62(62 * 2000)) counts.set(c, (counts.get(c) ?? 0) + 1)
    expect(counts.size).toBe(62)
    for (const n of counts.values()) expect(Math.abs(n - 2000)).toBeLessThan(400)
  })

  test('raw keys are gk- plus 40 base62; the prefix is 12 characters; hashes are SHA-256 hex', () => {
    const raw = generateRawKey()
    expect(raw).toMatch(KEY_PATTERN)
    expect(keyDisplayPrefix(raw)).toBe(raw.slice(0, 12))
    expect(sha256Hex(raw)).toMatch(/^[0-9a-f]{64}$/)
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
    expect(generateResetToken()).toMatch(/^[\w-]{43}$/)
  })
})
