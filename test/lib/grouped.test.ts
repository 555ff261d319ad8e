import { expect, test } from 'bun:test'
import { grouped } from '../../src/lib/grouped'

test('items of one event-loop turn are written together; later ones wait for the write in flight', async () => {
  const calls: number[][] = []
  let release: () => void = () => {}
  const write = grouped<number, string>(async (items) => {
    calls.push(items)
    if (calls.length === 1) await new Promise<void>((r) => (release = r))
    return items.map((i) => `done ${i}`)
  }, 10)
  const first = [write(1), write(2), write(3)]
  // The first group is in flight (held); these arrive meanwhile and form the next one.
  while (calls.length === 0) await new Promise((r) => setImmediate(r))
  const second = [write(4), write(5)]
  release()
  expect(await Promise.all([...first, ...second])).toEqual(['done 1', 'done 2', 'done 3', 'done 4', 'done 5'])
  expect(calls).toEqual([
    [1, 2, 3],
    [4, 5],
  ])
})

test('a group is at most `most` items', async () => {
  const calls: number[][] = []
  const write = grouped<number, number>(async (items) => {
    calls.push(items)
    return items
  }, 2)
  expect(await Promise.all([1, 2, 3, 4, 5].map(write))).toEqual([1, 2, 3, 4, 5])
  expect(calls).toEqual([[1, 2], [3, 4], [5]])
})

test('when a group fails, each item is written alone: only the bad one fails', async () => {
  const calls: number[][] = []
  const write = grouped<number, number>(async (items) => {
    calls.push(items)
    if (items.includes(2)) throw new Error('item 2 is bad')
    return items.map((i) => i * 10)
  }, 10)
  const results = await Promise.allSettled([write(1), write(2), write(3)])
  expect(results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message))).toEqual([
    10,
    'item 2 is bad',
    30,
  ])
  expect(calls).toEqual([[1, 2, 3], [1], [2], [3]])
})
