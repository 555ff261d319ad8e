import { describe, expect, test } from 'bun:test'
import { CompactIdSet, fnv1a32 } from '../../src/lib/id-set'
import { LineSplitter } from '../../src/lib/lines'

type Got = [string | null, number, number, number]

function split(chunks: (string | Uint8Array)[], max = 1024): { lines: Got[]; count: number } {
  const lines: Got[] = []
  const s = new LineSplitter(max, (l, n, off, len) =>
    lines.push([l === null ? null : new TextDecoder('utf-8', { ignoreBOM: true }).decode(l), n, off, len]),
  )
  for (const c of chunks) s.push(typeof c === 'string' ? new TextEncoder().encode(c) : c)
  s.end()
  return { lines, count: s.lines }
}

describe('LineSplitter', () => {
  test('physical line numbers and byte offsets across chunk boundaries; blank lines skipped', () => {
    const { lines, count } = split(['ab', 'c\n\n  \nde', 'f\r\n', 'g'])
    expect(lines).toEqual([
      ['abc', 1, 0, 3],
      ['def', 4, 8, 3],
      ['g', 5, 13, 1],
    ])
    expect(count).toBe(5)
  })

  test('a BOM is dropped from the first line only, and shifts its offset', () => {
    const bom = new Uint8Array([0xef, 0xbb])
    const { lines } = split([bom, new Uint8Array([0xbf, 0x41, 10, 0xef, 0xbb, 0xbf, 0x42])])
    expect(lines[0]).toEqual(['A', 1, 3, 1])
    expect(lines[1]![0]).toBe('\uFEFFB')
  })

  test('an over-long line is reported as null without being kept; an all-blank long line is skipped', () => {
    const { lines } = split(['x'.repeat(5), 'y'.repeat(10), '\nok\n', ' '.repeat(40), '\t\nz'], 8)
    expect(lines).toEqual([
      [null, 1, 0, 0],
      ['ok', 2, 16, 2],
      ['z', 4, 61, 1],
    ])
  })

  test('the limit counts content, not the CR of a CRLF', () => {
    const { lines } = split(['12345678\r\n123456789\r\n'], 8)
    expect(lines.map((l) => l[0])).toEqual(['12345678', null])
  })
})

describe('CompactIdSet', () => {
  // Ids stored as "lines" of a fake file: the set re-reads them only to confirm a hash match.
  function harness(hash?: (s: string, seed: number) => number) {
    const file: string[] = []
    const set = new CompactIdSet((offset) => file[offset] ?? null, hash)
    const add = (id: string) => {
      file.push(id)
      return set.addIfAbsent(id, file.length - 1, id.length)
    }
    return { set, add }
  }

  test('finds duplicates exactly even when every id has the same hash', () => {
    const { set, add } = harness(() => 42)
    expect(add('a')).toBe(false)
    expect(add('b')).toBe(false)
    expect(add('a')).toBe(true)
    expect(add('c')).toBe(false)
    expect(add('b')).toBe(true)
    expect(set.size).toBe(3)
    expect(set.confirmations).toBeGreaterThan(0)
  })

  test('find() takes no hash match for the id: only an exact one, at a slot that locates it', () => {
    const { set, add } = harness(() => 42)
    for (const id of ['a', 'b', 'c']) add(id)
    expect(set.find('z')).toBe(-1)
    const slot = set.find('b')
    expect(slot).toBeGreaterThanOrEqual(0)
    expect(set.locate(slot)).toEqual({ offset: 1, length: 1 })
    const occupied = Array.from({ length: set.slots }, (_, i) => set.locate(i)).filter((w) => w !== null)
    expect(occupied).toHaveLength(3)
  })

  test('grows past its initial capacity and stays exact', () => {
    const { set, add } = harness()
    for (let i = 0; i < 50_000; i++) expect(add(`req-${i}`)).toBe(false)
    for (let i = 0; i < 50_000; i += 997) expect(add(`req-${i}`)).toBe(true)
    expect(set.size).toBe(50_000)
    // 16 bytes a slot at load ≤ 0.75: far below a Set of strings (~300 bytes a line).
    expect(set.bytes / set.size).toBeLessThan(48)
  })

  test('the default hash is seeded FNV-1a', () => {
    expect(fnv1a32('abc', 0)).not.toBe(fnv1a32('abc', 1))
    // Seed 0 is plain 32-bit FNV-1a: the published test vectors.
    expect(fnv1a32('', 0)).toBe(0x811c9dc5)
    expect(fnv1a32('abc', 0)).toBe(0x1a47e90b)
  })
})
