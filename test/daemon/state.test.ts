import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { StateDir } from '../../src/daemon/state'

const root = mkdtempSync(join(tmpdir(), 'gk-state-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('daemon state directory', () => {
  test('machine_id is generated once and survives restarts; worker_id is persisted with its server', () => {
    const dir = join(root, 'a')
    const first = new StateDir(dir).identity()
    expect(first.machine_id).toMatch(/^[0-9a-f]{32}$/)
    expect(first.worker_id).toBeUndefined()
    const again = new StateDir(dir)
    expect(again.identity().machine_id).toBe(first.machine_id)
    again.saveWorkerId('wrk_123', 'http://cp:8080')
    const restarted = new StateDir(dir).identity()
    expect(restarted).toEqual({
      machine_id: first.machine_id,
      worker_id: 'wrk_123',
      server: 'http://cp:8080',
    })
    expect(statSync(join(dir, 'worker.json')).mode & 0o777).toBe(0o600)
    // Another directory is another machine.
    expect(new StateDir(join(root, 'b')).identity().machine_id).not.toBe(first.machine_id)
  })

  test('a corrupt worker.json gets a new identity instead of a crash', () => {
    const dir = join(root, 'corrupt')
    new StateDir(dir)
    writeFileSync(join(dir, 'worker.json'), '{not json')
    expect(new StateDir(dir).identity().machine_id).toMatch(/^[0-9a-f]{32}$/)
  })

  test('one daemon per state directory: the lock is held while its holder runs and names it; what a pid file says never blocks', () => {
    const dir = join(root, 'locked')
    const state = new StateDir(dir)
    const unlock = state.lock()
    const { pid, started_at } = JSON.parse(readFileSync(join(dir, 'daemon.lock'), 'utf8'))
    expect(pid).toBe(process.pid)
    // flock(2) is per open file: a second claim fails even from this process.
    expect(() => new StateDir(dir).lock()).toThrow(
      `another daemon (pid ${process.pid}, started ${started_at}) uses the state directory ${dir}: stop it, or give this one its own --state-dir`,
    )
    unlock()
    // What a crashed run (or a daemon from before the lock) left names a pid that is alive now,
    // taken by another process (pid 1 is alive on every Unix): it blocks nothing, and the old pid
    // file goes.
    writeFileSync(
      join(dir, 'daemon.lock'),
      JSON.stringify({ pid: 1, started_at: '2020-01-01T00:00:00.000Z' }),
    )
    writeFileSync(join(dir, 'daemon.pid'), '1')
    const relock = new StateDir(dir).lock()
    expect(existsSync(join(dir, 'daemon.pid'))).toBe(false)
    expect(JSON.parse(readFileSync(join(dir, 'daemon.lock'), 'utf8')).pid).toBe(process.pid)
    relock()
  })

  test('job directories are fresh per job and cleared at start', () => {
    const state = new StateDir(join(root, 'jobs'))
    const d = state.jobDir('batch_abc')
    writeFileSync(join(d, 'input.jsonl'), 'x')
    expect(state.jobDir('batch_abc')).toBe(d)
    expect(() => statSync(join(d, 'input.jsonl'))).toThrow()
    writeFileSync(join(d, 'left-over'), 'x')
    state.clearJobs()
    expect(() => statSync(d)).toThrow()
  })
})
