import { expect, test } from 'bun:test'
import { Float64Column, Uint8Column, Uint32Column } from '../../src/lib/columns'

test('columns keep what they are given across chunks, and read it back by index and whole', () => {
  const n = 40_000 // over two chunks of 16,384
  const u32 = new Uint32Column()
  const f64 = new Float64Column()
  const u8 = new Uint8Column()
  for (let i = 0; i < n; i++) {
    u32.push(i * 7 + 1)
    f64.push(i * 1.5 + 2 ** 40)
    u8.push(i & 255)
  }
  expect([u32.length, f64.length, u8.length]).toEqual([n, n, n])
  expect([u32.at(0), u32.at(16_384), u32.at(n - 1)]).toEqual([1, 16_384 * 7 + 1, (n - 1) * 7 + 1])
  expect(f64.at(20_000)).toBe(20_000 * 1.5 + 2 ** 40)
  const all = u32.toArray()
  expect(all.length).toBe(n)
  expect(all.every((v, i) => v === i * 7 + 1)).toBe(true)
  // Chunks are whole: the bytes held are whole chunks of the element size.
  expect(u32.bytes).toBe(3 * 16_384 * 4)
  expect(u8.bytes).toBe(3 * 16_384)
})
