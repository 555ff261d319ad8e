import { expect, test } from 'bun:test'
import {
  formatAgo,
  formatBytes,
  formatCount,
  formatModelState,
  formatShare,
  formatTime,
  formatVram,
  toCsv,
  vramShare,
} from '../../web/lib/format'

test('formatBytes', () => {
  expect(formatBytes(0)).toBe('0 B')
  expect(formatBytes(1023)).toBe('1023 B')
  expect(formatBytes(1536)).toBe('1.5 KB')
  expect(formatBytes(200 * 1024 * 1024)).toBe('200 MB')
  expect(formatBytes(3 * 1024 ** 5)).toBe('3072 TB')
})

test('formatAgo', () => {
  expect(formatAgo(null, 1000)).toBe('never')
  expect(formatAgo(998, 1000)).toBe('just now')
  expect(formatAgo(958, 1000)).toBe('42 s ago')
  expect(formatAgo(1000 - 300, 1000)).toBe('5 min ago')
  expect(formatAgo(1000 - 3 * 3600, 1000 * 100)).toBe('1 d ago')
  expect(formatAgo(100_000 - 3 * 3600, 100_000)).toBe('3 h ago')
  // A clock slightly ahead of the viewer's never reads as the future.
  expect(formatAgo(1010, 1000)).toBe('just now')
})

test('formatTime', () => {
  expect(formatTime(null)).toBe('—')
  expect(formatTime(0)).toMatch(/^19(69|70)-\d\d-\d\d \d\d:\d\d$/)
})

test('formatVram and vramShare', () => {
  expect(formatVram(24, 10.5)).toBe('13.5 / 24 GB')
  expect(formatVram(24, null)).toBe('? / 24 GB')
  expect(formatVram(null, null)).toBe('—')
  expect(vramShare(24, 6)).toBe(0.75)
  expect(vramShare(24, 30)).toBe(0)
  expect(vramShare(null, 1)).toBeNull()
  expect(vramShare(24, null)).toBeNull()
})

test('formatCount', () => {
  expect(formatCount(0)).toBe('0')
  expect(formatCount(999)).toBe('999')
  expect(formatCount(1000)).toBe('1,000')
  expect(formatCount(1234567)).toBe('1,234,567')
})

test('toCsv quotes what would break a cell, and only that', () => {
  expect(
    toCsv([
      ['key', 'total_tokens'],
      ['gk-AAAAAAAAA (laptop)', 24],
    ]),
  ).toBe('key,total_tokens\ngk-AAAAAAAAA (laptop),24\n')
  expect(toCsv([['a, b', 'say "hi"', 'two\nlines', 'cr\r']])).toBe(
    '"a, b","say ""hi""","two\nlines","cr\r"\n',
  )
})

test('formatModelState', () => {
  expect(formatModelState({ state: 'on_disk', progress: null })).toBe('on disk')
  expect(formatModelState({ state: 'loading', progress: null })).toBe('loading')
  expect(
    formatModelState({ state: 'downloading', progress: { completed_bytes: 300, total_bytes: 1000 } }),
  ).toBe('downloading 30 %')
  expect(
    formatModelState({ state: 'downloading', progress: { completed_bytes: null, total_bytes: null } }),
  ).toBe('downloading')
})

test('formatShare', () => {
  expect(formatShare(128, 167)).toBe('76 % (128 of 167)')
  expect(formatShare(0, 4_000)).toBe('0 % (0 of 4,000)')
  expect(formatShare(1_200, 1_200)).toBe('100 % (1,200 of 1,200)')
  // Rounded down: 100 % only when every token was.
  expect(formatShare(999, 1_000)).toBe('99 % (999 of 1,000)')
  expect(formatShare(0, 0)).toBe('—')
})
