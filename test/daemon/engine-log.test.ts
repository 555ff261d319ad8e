import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { manualTimers, type Timers } from '../../src/daemon/backoff'
import { SupervisedChild } from '../../src/daemon/engines/child'
import { StateDir } from '../../src/daemon/state'
import { until } from '../helpers/until'

// An engine's log (src/daemon/engines/engine-log.ts, docs/worker.md "Engine logs"): appended to,
// bounded by size for both engine kinds (they share the supervised child), and the lines a failure
// quotes are its last ones, wherever the rotation put them.

const root = mkdtempSync(join(tmpdir(), 'gk-engine-log-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const ENGINE = resolve(import.meta.dir, '../helpers/env-engine.ts')
const LIMIT = 64 * 1024
const size = (path: string) => (existsSync(path) ? statSync(path).size : 0)

/** A stand-in engine that prints a line per request it answers. */
const ECHO =
  "Bun.serve({ hostname: '127.0.0.1', port: Number(process.argv.at(-1)), fetch: (r) => { console.log('request ' + new URL(r.url).pathname); return new Response('ok') } })"

function child(state: StateDir, command: (port: number) => string[], checkMs = 3_600_000, timers?: Timers) {
  return new SupervisedChild({
    name: 'stand-in',
    state,
    command,
    ...(timers ? { timers } : {}),
    ready: async (url) => {
      await fetch(url)
      return true
    },
    log: { maxBytes: LIMIT, checkMs },
  })
}

describe('an engine log', () => {
  test('is appended to: truncated under its writer, it goes on from its start, never with zero bytes', async () => {
    const c = child(new StateDir(mkdtempSync(join(root, 's-'))), (port) => ['bun', '-e', ECHO, String(port)])
    await c.start()
    try {
      await fetch(`${c.url}/one`)
      await until('the line written', () => readFileSync(c.logPath, 'utf8').includes('request /one'))
      truncateSync(c.logPath, 0)
      await fetch(`${c.url}/two`)
      await until('the next line written', () => readFileSync(c.logPath, 'utf8').includes('request /two'))
      expect(readFileSync(c.logPath, 'utf8')).toBe('request /two\n')
    } finally {
      await c.stop()
    }
  })

  test('past its limit: its last part moves to .log.1 from a line’s start, it starts over, and its last lines read across both', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const c = child(state, (port) => ['bun', ENGINE, '--noise', '3000', '--port', String(port)])
    await c.start()
    try {
      // The engine is done writing once it says so; then the failure path reads its last lines.
      await until('the noise written', () => readFileSync(c.logPath, 'utf8').includes('noise done'))
      expect(size(c.logPath)).toBeGreaterThan(4 * LIMIT)
      const last = c.lastLines(undefined, 3)
      expect(last).toEqual([
        `noise line 2998 ${'x'.repeat(80)}`,
        `noise line 2999 ${'x'.repeat(80)}`,
        'noise done',
      ])
      expect(size(c.logPath)).toBe(0)
      const older = readFileSync(`${c.logPath}.1`, 'utf8')
      expect(older.length).toBeLessThanOrEqual(LIMIT)
      expect(older).toStartWith('noise line ')
      expect(older).toEndWith('noise done\n')
      // Only the lines a filter keeps (the router's: a model's port), from both files.
      expect(c.lastLines((l) => l.startsWith('noise line 2'), 1)).toEqual([
        `noise line 2999 ${'x'.repeat(80)}`,
      ])
    } finally {
      await c.stop()
    }
  })

  test('a running engine’s log is checked on an interval: written far past its limit, it stays bounded', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const c = child(state, (port) => ['bun', ENGINE, '--noise', '6000', '--port', String(port)], 20)
    await c.start()
    try {
      // Nothing here reads or trims it: only the supervisor's check can bring both files under the limit.
      await until(
        'the log rotated and bounded',
        () => existsSync(`${c.logPath}.1`) && size(c.logPath) <= LIMIT && size(`${c.logPath}.1`) <= LIMIT,
      )
    } finally {
      await c.stop()
    }
  })

  test('the interval is the injected clock’s: nothing trims a log past its limit until the clock passes checkMs', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const timers = manualTimers(Date.now())
    const c = child(
      state,
      (port) => ['bun', ENGINE, '--noise', '3000', '--port', String(port)],
      60_000,
      timers,
    )
    // The clock moves only when told: a ticker moves it (10 ms a step) while the start and the stop wait on it.
    let ticking = true
    const tick = async () => {
      while (ticking) {
        timers.advance(10)
        await Bun.sleep(5)
      }
    }
    let ticker = tick()
    try {
      await c.start()
      ticking = false
      await ticker
      await until('the noise written', () => readFileSync(c.logPath, 'utf8').includes('noise done'))
      // Far past its limit, and no check has come due on the clock.
      expect(size(c.logPath)).toBeGreaterThan(4 * LIMIT)
      timers.advance(60_000)
      await until('the log rotated once the clock passed a check', () => existsSync(`${c.logPath}.1`))
      expect(size(c.logPath)).toBeLessThanOrEqual(LIMIT)
    } finally {
      ticking = true
      ticker = tick()
      await c.stop()
      ticking = false
      await ticker
    }
  })

  test('a fresh start keeps the last run’s output as .log.1, and quotes only its own lines', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const c = child(state, (port) => ['bun', '-e', ECHO, String(port)])
    writeFileSync(c.logPath, 'the last run said this\n')
    await c.start()
    try {
      expect(readFileSync(`${c.logPath}.1`, 'utf8')).toBe('the last run said this\n')
      await fetch(`${c.url}/x`)
      await until('its line', () => c.lastLines().includes('request /x'))
      expect(c.lastLines()).not.toContain('the last run said this')
    } finally {
      await c.stop()
    }
  })
})
