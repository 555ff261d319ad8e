import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { manualTimers, RestartBackoff, type Timers } from '../../src/daemon/backoff'
import {
  alive,
  checkProcessMove,
  freePort,
  groupMembers,
  IllegalProcessMove,
  PROCESS_MOVES,
  StartTimeout,
  SupervisedChild,
} from '../../src/daemon/engines/child'
import { StateDir } from '../../src/daemon/state'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// The supervised engine process (src/daemon/engines/child.ts) with a stand-in engine: a small Bun
// HTTP server. The real router under the same supervision: test/daemon/managed-supervision.test.ts.

const root = mkdtempSync(join(tmpdir(), 'gk-child-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const SERVE =
  "Bun.serve({ hostname: '127.0.0.1', port: Number(process.argv.at(-1)), fetch: () => new Response('ok') }); console.log('up')"

function child(state: StateDir, tag = 'a') {
  return new SupervisedChild({
    name: 'stand-in',
    state,
    command: (port) => ['bun', '-e', SERVE, tag, String(port)],
    ready: async (url) => (await fetch(url)).ok,
    restart: 'always',
  })
}

describe('a supervised engine process', () => {
  test('started, recorded with its output in the state directory, stopped and forgotten', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const c = child(state)
    await c.start()
    const pid = c.pid!
    const record = JSON.parse(readFileSync(join(state.dir, 'engines', 'stand-in.json'), 'utf8'))
    expect(record).toMatchObject({ pid, argv: ['bun', '-e', SERVE, 'a', String(record.port)] })
    expect((await fetch(c.url)).ok).toBe(true)
    await until('its output in the log', () => c.lastLines().includes('up'))
    await c.stop()
    expect(alive(pid)).toBe(false)
    expect(() => statSync(join(state.dir, 'engines', 'stand-in.json'))).toThrow()
  })

  test('what the engine starts goes with it: stopping it ends its own children too (its process group)', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const pidFile = join(state.dir, 'grandchild.pid')
    // A stand-in engine that starts a worker of its own, as a router or vLLM does, which ignores SIGTERM.
    const withWorker = `const w = Bun.spawn(['sh', '-c', 'trap "" TERM; sleep 300'], { stdio: ['ignore', 'ignore', 'ignore'] }); require('node:fs').writeFileSync(${JSON.stringify(pidFile)}, String(w.pid)); ${SERVE}`
    const c = new SupervisedChild({
      name: 'stand-in',
      state,
      command: (port) => ['bun', '-e', withWorker, String(port)],
      ready: async (url) => (await fetch(url)).ok,
      restart: 'always',
    })
    await c.start()
    const worker = Number(
      await until('the worker started', () => readFileSync(pidFile, 'utf8').trim() || null),
    )
    expect(alive(worker)).toBe(true)
    await c.stop()
    await until('the worker gone with its engine', () => !alive(worker))
  })

  test('dies unasked: the listeners hear how, and it is started again', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const c = child(state)
    const heard: string[] = []
    c.onExit((reason) => heard.push(reason))
    await c.start()
    const first = c.pid!
    try {
      process.kill(first, 'SIGKILL')
      await until('the exit heard', () => heard.length === 1)
      expect(heard[0]).toStartWith('the engine was killed (SIGKILL); its last lines: up')
      await until('started again', () => c.running && c.pid !== first)
      expect((await fetch(c.url)).ok).toBe(true)
    } finally {
      await c.stop()
    }
  })

  test('left by a killed daemon: adopted when it is the same command (and stopped with its new owner), stopped when it is another', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const same = child(state, 'a')
    const other = child(state, 'b')
    const procs: Subprocess[] = []
    /** What a killed daemon leaves: its engine running, and the record saying so. */
    async function leftover(tag: string) {
      const port = freePort()
      const argv = ['bun', '-e', SERVE, tag, String(port)]
      const proc = Bun.spawn(argv, { stdout: 'ignore', stderr: 'ignore' })
      procs.push(proc)
      await until(
        'the leftover answering',
        async () => (await fetch(`http://127.0.0.1:${port}`).catch(() => null))?.ok,
      )
      state.writeJson(join('engines', 'stand-in.json'), {
        pid: proc.pid,
        port,
        argv,
        started_at_ms: Date.now(),
      })
      return proc
    }
    try {
      const first = await leftover('a')
      await same.start()
      expect(same.adopted).toBe(true)
      expect(same.pid).toBe(first.pid)
      await same.stop()
      await first.exited
      expect(alive(first.pid)).toBe(false)

      const second = await leftover('a')
      await other.start()
      expect(other.adopted).toBe(false)
      await second.exited
      expect(alive(second.pid)).toBe(false)
      expect(other.pid).not.toBe(second.pid)
    } finally {
      await other.stop()
      for (const p of procs) p.kill()
    }
  })

  test('a record whose pid is now another process (pid reuse) is neither adopted nor stopped', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const stranger = Bun.spawn(['sleep', '30'])
    const c = child(state)
    try {
      state.writeJson(join('engines', 'stand-in.json'), {
        pid: stranger.pid,
        port: 1,
        argv: ['bun', '-e', SERVE, 'a', '1'],
        started_at_ms: 0,
      })
      await c.start()
      expect(c.adopted).toBe(false)
      expect(c.pid).not.toBe(stranger.pid)
      expect(alive(stranger.pid)).toBe(true)
      await c.stop()
    } finally {
      stranger.kill()
    }
  })
})

describe('one supervisor: its states, its back-off, its group ended on every end', () => {
  test('the process states move only along the table', () => {
    expect(PROCESS_MOVES).toEqual({
      stopped: ['starting', 'ready'],
      starting: ['ready', 'stopping'],
      ready: ['stopping'],
      stopping: ['stopped'],
    })
    expect(() => checkProcessMove('stopped', 'stopping')).toThrow(
      'illegal engine process state change stopped → stopping',
    )
    expect(() => checkProcessMove('ready', 'starting')).toThrow(IllegalProcessMove)
  })

  test('the restart back-off: 1 s, doubling to 30 s; a run that lasted a minute starts over', () => {
    const b = new RestartBackoff()
    expect(b.delayMs).toBe(0)
    const waits: number[] = []
    for (let i = 0; i < 7; i++) {
      b.ended(1000 * i, 1000 * i + 10)
      waits.push(b.delayMs)
    }
    expect(waits).toEqual([1000, 2000, 4000, 8000, 16_000, 30_000, 30_000])
    b.ended(0, 60_000)
    expect(b.delayMs).toBe(1000)
    expect(b.leftMs(60_400)).toBe(600)
  })

  /** A stand-in engine that starts a worker of its own (vLLM's EngineCore) which ignores SIGTERM. */
  function withWorker(
    state: StateDir,
    o: { timers?: Timers; restart?: 'always' | 'never'; silenceMs?: number } = {},
  ) {
    const pidFile = join(state.dir, 'worker.pid')
    const code = `const w = Bun.spawn(['sh', '-c', 'trap "" TERM; sleep 300'], { stdio: ['ignore', 'ignore', 'ignore'] }); require('node:fs').writeFileSync(${JSON.stringify(pidFile)}, String(w.pid)); console.log('up'); ${SERVE}`
    const c = new SupervisedChild({
      name: 'stand-in',
      state,
      command: (port) => ['bun', '-e', code, String(port)],
      ready: async (url) => (await fetch(url)).ok,
      restart: o.restart ?? 'never',
      ...(o.timers ? { timers: o.timers } : {}),
      ...(o.silenceMs ? { silenceMs: o.silenceMs } : {}),
    })
    const worker = () => Number(readFileSync(pidFile, 'utf8').trim())
    return { c, worker }
  }

  test('its API process dies: the rest of its group is ended before the listeners hear, and the state is stopped', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const { c, worker } = withWorker(state)
    const heard: { reason: string; workerAlive: boolean; state: string }[] = []
    c.onExit((reason) => heard.push({ reason, workerAlive: alive(worker()), state: c.state }))
    await c.start()
    const w = await until('its worker', () => worker() || null)
    expect(c.state).toBe('ready')
    process.kill(c.pid!, 'SIGKILL')
    await until('the end heard', () => heard.length === 1)
    expect(heard[0]).toEqual({
      reason: expect.stringMatching(/^the engine was killed \(SIGKILL\)/),
      workerAlive: false,
      state: 'stopped',
    })
    expect(alive(w)).toBe(false)
  })

  test('a start that goes silent past its limit is given up, its group ended; one that keeps talking is not', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const pidFile = join(state.dir, 'worker.pid')
    // Never answers; a worker of its own holds on. Said once, then silence.
    const silent = `Bun.spawn(['sh', '-c', 'trap "" TERM; sleep 300'], { stdio: ['ignore', 'ignore', 'ignore'] }); require('node:fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid)); console.log('loading'); setInterval(() => {}, 1000)`
    const c = new SupervisedChild({
      name: 'silent',
      state,
      command: () => ['bun', '-e', silent],
      ready: async () => false,
      restart: 'never',
      silenceMs: 300,
    })
    const e = await c.start().catch((x) => x)
    expect(e).toBeInstanceOf(StartTimeout)
    expect(e.lastLines).toEqual(['loading'])
    expect(c.state).toBe('stopped')
    const leader = Number(readFileSync(pidFile, 'utf8'))
    expect(groupMembers(leader)).toEqual([])
    // Talking all along (a line every 100 ms), it is waited for past the limit until it answers.
    let answer = false
    const talker = new SupervisedChild({
      name: 'talker',
      state,
      command: () => ['bun', '-e', "setInterval(() => console.log('shard loaded'), 100)"],
      ready: async () => answer,
      restart: 'never',
      silenceMs: 300,
    })
    const started = talker.start()
    await until('talking past the limit', () => talker.lastLines().length >= 6)
    answer = true
    await started
    expect(talker.state).toBe('ready')
    await talker.stop()
    expect(talker.state).toBe('stopped')
  })

  test('restart waits on the injected clock: the back-off is asked of it, and nothing starts before it passes', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const timers = manualTimers(Date.now())
    const { c } = withWorker(state, { timers, restart: 'always' })
    // The clock moves only when told: a ticker moves it while the test waits for the process.
    let ticking = true
    const ticker = (async () => {
      while (ticking) {
        timers.advance(50)
        await Bun.sleep(5)
      }
    })()
    const pause = async () => {
      ticking = false
      await ticker
    }
    try {
      await c.start()
      const first = c.pid!
      await pause()
      const heard: string[] = []
      c.onExit((r) => heard.push(r))
      process.kill(first, 'SIGKILL')
      // The end is heard (its group ended: waits on the clock too, so move it a little).
      while (heard.length === 0) {
        timers.advance(10)
        await Bun.sleep(5)
      }
      // The restart asks the clock for its second of back-off.
      await until('the back-off asked', () => timers.asked.includes(1000))
      // Not started again until the clock passes the second: its wait resolves only then.
      timers.advance(900)
      await Promise.resolve()
      expect(c.state).toBe('stopped')
      timers.advance(100)
      await until('started again', async () => {
        timers.advance(50)
        return c.state === 'ready' && c.pid !== first
      })
    } finally {
      // Stopping waits on the clock too (the grace, the group's end): it moves meanwhile.
      ticking = true
      const moving = (async () => {
        while (ticking) {
          timers.advance(50)
          await Bun.sleep(5)
        }
      })()
      await c.stop().catch(() => {})
      ticking = false
      await moving
    }
  })

  test('a process that dies at every restart is given up after RestartBackoff.GIVE_UP_AFTER ends in a row, saying why; nothing starts it again on its own', async () => {
    const state = new StateDir(mkdtempSync(join(root, 's-')))
    const timers = manualTimers(Date.now())
    const spawned: number[] = []
    const c = new SupervisedChild({
      name: 'stand-in',
      state,
      timers,
      restart: 'always',
      // The first start serves; every later one dies at once, as a router whose GPU went away.
      command: (port) => {
        spawned.push(port)
        return spawned.length === 1
          ? ['bun', '-e', SERVE, String(port)]
          : ['bun', '-e', "console.log('CUDA error: no CUDA-capable device is detected'); process.exit(3)"]
      },
      ready: async (url) => (await fetch(url)).ok,
    })
    let ticking = true
    const ticker = (async () => {
      while (ticking) {
        timers.advance(1000)
        await Bun.sleep(5)
      }
    })()
    const logFrom = capturedLogLines().length
    const gaveUp = () =>
      capturedLogLines()
        .slice(logFrom)
        .map((l) => JSON.parse(l))
        .find((r) => r.msg === 'engine restart given up; it starts again when next needed')
    try {
      await c.start()
      process.kill(c.pid!, 'SIGKILL')
      const line = await until('the restarts given up', gaveUp, 60_000)
      expect(line).toMatchObject({ engine: 'stand-in', ends_in_a_row: RestartBackoff.GIVE_UP_AFTER })
      expect(line.error).toContain('exited with code 3 before answering')
      expect(line.error).toContain('CUDA error: no CUDA-capable device is detected')
      // The first run, then a start for each end in a row but the first (the kill).
      expect(spawned).toHaveLength(RestartBackoff.GIVE_UP_AFTER)
      expect(c.state).toBe('stopped')
      // Many longest waits later, no wait was asked and nothing was started.
      const asked = timers.asked.length
      for (let i = 0; i < 10; i++) {
        timers.advance(RestartBackoff.MAX_MS)
        await Bun.sleep(5)
      }
      expect(timers.asked.length).toBe(asked)
      expect(spawned).toHaveLength(RestartBackoff.GIVE_UP_AFTER)
    } finally {
      await c.stop().catch(() => {})
      ticking = false
      await ticker
    }
  })
})
