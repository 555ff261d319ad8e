import { expect, test } from 'bun:test'
import {
  addSample,
  averageRate,
  formatDuration,
  formatRate,
  RATE_WINDOW_MS,
  rateOf,
  type Sample,
  timeLeft,
} from '../../web/lib/rate'

// The batch page's throughput and time left (docs/api.md §16), from samples the page took itself.

const run = (...points: [number, number][]) =>
  points.reduce<Sample[]>((kept, [at, done]) => addSample(kept, { at, done }), [])

test('no rate from one sample, nor from two taken at once', () => {
  expect(rateOf([])).toBeNull()
  expect(rateOf(run([0, 0]))).toBeNull()
  expect(rateOf(run([0, 0], [100, 5]))).toBeNull()
})

test('the rate is requests per second between the oldest and newest sample kept', () => {
  expect(rateOf(run([0, 0], [2000, 10]))).toBe(5)
  expect(rateOf(run([0, 0], [2000, 0], [4000, 10]))).toBe(2.5)
  // Nothing done for a while is a rate of zero, and then no time left can be said.
  expect(rateOf(run([0, 4], [2000, 4]))).toBe(0)
})

test('recent: samples older than the window are dropped, keeping the last one before it', () => {
  const points: [number, number][] = []
  for (let at = 0; at <= 60_000; at += 2000) points.push([at, at < 30_000 ? 0 : (at - 30_000) / 100])
  const kept = run(...points)
  expect(kept[0]!.at).toBe(60_000 - RATE_WINDOW_MS - 2000)
  expect(rateOf(kept)).toBeCloseTo(300 / 32, 5)
})

test('counts that go down (a shard requeued) start the samples over', () => {
  const kept = run([0, 0], [2000, 20], [4000, 5])
  expect(kept).toEqual([{ at: 4000, done: 5 }])
  expect(rateOf(kept)).toBeNull()
})

test('time left is what remains at the recent rate; unknown without a rate', () => {
  expect(timeLeft(100, 4)).toBe(25)
  expect(timeLeft(100, 0)).toBeNull()
  expect(timeLeft(100, null)).toBeNull()
  expect(timeLeft(0, null)).toBe(0)
})

test('a finished run has the average rate of its stamps', () => {
  expect(averageRate(60, 1000, 1030)).toBe(2)
  expect(averageRate(60, null, 1030)).toBeNull()
  expect(averageRate(60, 1030, 1030)).toBeNull()
})

test('formatRate and formatDuration', () => {
  expect(formatRate(null)).toBe('—')
  expect(formatRate(0)).toBe('0 req/s')
  expect(formatRate(0.25)).toBe('0.25 req/s')
  expect(formatRate(3.16)).toBe('3.2 req/s')
  expect(formatRate(3)).toBe('3 req/s')
  expect(formatRate(1234.5)).toBe('1,235 req/s')
  expect(formatDuration(null)).toBe('—')
  expect(formatDuration(0)).toBe('0 s')
  expect(formatDuration(41.2)).toBe('42 s')
  expect(formatDuration(125)).toBe('2 min 5 s')
  expect(formatDuration(120)).toBe('2 min')
  expect(formatDuration(7260)).toBe('2 h 1 min')
  expect(formatDuration(183_600)).toBe('2 d 3 h')
})
