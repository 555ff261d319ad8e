import { describe, expect, test } from 'bun:test'
import { pick } from '../../src/lib/pick'

describe('pick', () => {
  test('copies the named fields in the order named, and nothing else', () => {
    const row = { id: 'wh_1', secret: 'whsec_x', url: 'https://a.test/', created_at: 5 }
    const picked = pick(row, ['url', 'id'])
    expect(Object.keys(picked)).toEqual(['url', 'id'])
    expect(picked).toEqual({ url: 'https://a.test/', id: 'wh_1' })
    expect('secret' in picked).toBe(false)
  })

  test('keeps a named field whose value is null or undefined', () => {
    const picked = pick({ a: null, b: undefined, c: 1 } as { a: null; b: undefined; c: number }, ['a', 'b'])
    expect(Object.keys(picked)).toEqual(['a', 'b'])
  })
})
