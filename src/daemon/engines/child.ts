import { closeSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { log as rootLog } from '../../lib/logger'
import { realTimers, type Timers } from '../backoff'
import type { StateDir } from '../state'
import { beginLog, LOG_CHECK_MS, LOG_MAX_BYTES, lastLogLines, openLog, rotateLog } from './engine-log'
import { engineEnv } from './env'

// An engine process the daemon owns (ARCHITECTURE.md's supervisor rule, docs/worker.md "Managed
// engines"): Erlang's supervisor and systemd's KillMode=control-group in small.
//
// - Recorded: `<state_dir>/engines/<name>.json` holds its pid, port, argv and start time while it
//   runs; its output (stdout and stderr, with its own children's) goes to `<name>.log` beside it,
//   so that what it said survives this daemon and can be quoted in errors; that log is appended to
//   and bounded by size (engines/engine-log.ts), checked every LOG_CHECK_MS while it runs.
// - Stopped with the daemon: stop() sends SIGTERM, then SIGKILL after a grace, and removes the record.
// - Restarted when it dies: the listeners hear why (its last lines), and it is started again after
//   a backoff (1 s, doubling to 30 s; back to 1 s once a run lasted a minute). Its models are gone.
// - Adopted or stopped at the next start: a daemon that was killed leaves its child running. The
//   next start finds the record; a live process whose command line is the recorded one is this
//   state directory's engine: adopted when it is the command this daemon would run (same binary,
//   same arguments) and answers, else stopped. Never two engines for one state directory.

const log = rootLog.child({ component: 'engine' })

export interface ChildRecord {
  pid: number
  port: number
  /** The argv it was started with, binary first. */
  argv: string[]
  started_at_ms: number
}

export interface ChildSpec {
  /** Its name in the state directory (engines/<name>.json, .log). */
  name: string
  state: StateDir
  /** The argv (binary first) of a start listening on `port`. */
  command(port: number): string[]
  /** Called before each spawn (not before an adoption). */
  beforeSpawn?(): void
  /** Whether it answers at `url` (polled after a start until it does; decides an adoption too). */
  ready(url: string): Promise<boolean>
  /** Its environment (engines/env.ts); default: the daemon's allow-list with no names added. */
  env?: Record<string, string>
  /** Longest wait for ready() after a start (default 60 s). */
  readyTimeoutMs?: number
  timers?: Timers
  /** Its log's size limit and how often it is checked (engines/engine-log.ts; tests shrink them). */
  log?: { maxBytes: number; checkMs: number }
}

const STOP_GRACE_MS = 10_000
const RESTART_MIN_MS = 1000
const RESTART_MAX_MS = 30_000
const STABLE_MS = 60_000
const WATCH_MS = 1000

export class SupervisedChild {
  private record: ChildRecord | null = null
  private proc: Subprocess | null = null
  private watch: ReturnType<typeof setInterval> | null = null
  private stopping = false
  private restarts = 0
  private restartTimer: ReturnType<typeof setTimeout> | null = null
  private readonly listeners = new Set<(reason: string) => void>()
  private readonly timers: Timers
  /** Whether the running process was found, not started, by this daemon. */
  adopted = false
  private lastPort = 0
  /** The current process has answered since it started (or was adopted). */
  private answered = false
  private logCheck: ReturnType<typeof setInterval> | null = null
  /** Its log was rotated since this run began: the run's first lines are in `.log.1`. */
  private rotated = false

  constructor(private readonly spec: ChildSpec) {
    this.timers = spec.timers ?? realTimers
    mkdirSync(this.dir, { recursive: true, mode: 0o700 })
  }

  private get dir() {
    return join(this.spec.state.dir, 'engines')
  }
  private get recordPath() {
    return join(this.dir, `${this.spec.name}.json`)
  }
  /** Where its output goes. */
  get logPath() {
    return join(this.dir, `${this.spec.name}.log`)
  }

  /** Where it listens (while it restarts: where it listened last). */
  get url(): string {
    return urlOf(this.record?.port ?? this.lastPort)
  }

  get pid(): number | null {
    return this.record?.pid ?? null
  }

  /** Whether it runs and has answered (not starting, restarting or stopped). */
  get running(): boolean {
    return this.record !== null && this.answered
  }

  /** Called when it dies unasked, with why (its last lines). */
  onExit(listener: (reason: string) => void) {
    this.listeners.add(listener)
  }

  /** Adopts what a killed run left when it is what this daemon would start, else stops it; then starts. */
  async start(): Promise<void> {
    this.stopping = false
    this.checkLog()
    const left = this.readRecord()
    if (left && sameProcess(left)) {
      const wanted = this.spec.command(left.port)
      if (sameArgv(wanted, left.argv) && (await this.spec.ready(urlOf(left.port)).catch(() => false))) {
        this.record = left
        this.lastPort = left.port
        this.adopted = true
        this.answered = true
        this.watchAdopted()
        log.info('adopted the engine a previous run left', {
          engine: this.spec.name,
          pid: left.pid,
          port: left.port,
          since: new Date(left.started_at_ms).toISOString(),
        })
        return
      }
      log.warn('stopping the engine a previous run left (another command, or not answering)', {
        engine: this.spec.name,
        pid: left.pid,
        argv: left.argv.join(' '),
      })
      await stopPid(left.pid, this.timers)
    }
    this.removeRecord()
    await this.spawn(left?.port ?? freePort(), true)
  }

  /** Stops it (SIGTERM, then SIGKILL after a grace) and forgets it. */
  async stop(): Promise<void> {
    this.stopping = true
    if (this.restartTimer) clearTimeout(this.restartTimer)
    this.restartTimer = null
    this.stopWatch()
    if (this.logCheck) clearInterval(this.logCheck)
    this.logCheck = null
    const record = this.record
    this.record = null
    if (this.proc) {
      const proc = this.proc
      this.proc = null
      if (proc.exitCode === null && proc.signalCode === null) {
        signalGroup(proc.pid, 'SIGTERM')
        const ended = await Promise.race([
          proc.exited.then(() => true),
          this.timers.sleep(STOP_GRACE_MS).then(() => false),
        ])
        if (!ended) {
          signalGroup(proc.pid, 'SIGKILL')
          await proc.exited
        }
      }
      // What the engine started and left behind (a worker that ignored SIGTERM) goes with it.
      endGroup(proc.pid)
    } else if (record) await stopPid(record.pid, this.timers)
    this.removeRecord()
    if (record) log.info('engine stopped', { engine: this.spec.name, pid: record.pid })
  }

  /** The last `n` lines of its output that `keep` accepts (all when not given). */
  lastLines(keep: (line: string) => boolean = () => true, n = 12): string[] {
    this.trimLog()
    return lastLogLines(this.logPath, { keep, n, older: this.rotated })
  }

  private async spawn(port: number, first: boolean): Promise<void> {
    const argv = this.spec.command(port)
    this.spec.beforeSpawn?.()
    // A fresh start begins a fresh log (the last run's is kept as .log.1): the lines quoted in
    // errors are this run's.
    if (first) {
      beginLog(this.logPath)
      this.rotated = false
    }
    const fd = openLog(this.logPath)
    let proc: Subprocess
    try {
      // Its own process group: stopping it stops what it starts too (a router's model processes,
      // vLLM's workers), and a Ctrl-C at the daemon's terminal reaches the daemon, which stops it.
      proc = Bun.spawn(argv, {
        stdin: 'ignore',
        stdout: fd,
        stderr: fd,
        env: this.spec.env ?? engineEnv(process.env),
        detached: true,
      })
    } catch (e) {
      throw new Error(`could not start ${argv[0]}: ${(e as Error).message}`)
    } finally {
      closeSync(fd)
    }
    this.proc = proc
    this.adopted = false
    const run: ChildRecord = { pid: proc.pid, port, argv, started_at_ms: this.timers.nowMs() }
    this.answered = false
    this.record = run
    this.lastPort = port
    this.spec.state.writeJson(join('engines', `${this.spec.name}.json`), run)
    try {
      const timeoutMs = this.spec.readyTimeoutMs ?? 60_000
      const deadline = this.timers.nowMs() + timeoutMs
      for (;;) {
        if (proc.exitCode !== null || proc.signalCode !== null)
          throw new Error(
            `${argv[0]} ${describeExit(proc.exitCode, proc.signalCode)} before answering${tailText(this.lastLines())}`,
          )
        if (this.proc !== proc) throw new Error(`${argv[0]} was stopped before it answered`)
        if (await this.spec.ready(urlOf(port)).catch(() => false)) break
        if (this.timers.nowMs() > deadline)
          throw new Error(`${argv[0]} did not answer within ${timeoutMs / 1000} s`)
        await this.timers.sleep(50)
      }
    } catch (e) {
      if (proc.exitCode === null && proc.signalCode === null) signalGroup(proc.pid, 'SIGKILL')
      await proc.exited
      endGroup(proc.pid)
      if (this.record === run) {
        this.record = null
        this.proc = null
        this.removeRecord()
      }
      throw e
    }
    this.answered = true
    // From here on its end is unasked (stop() forgets it first).
    void proc.exited.then(() => {
      if (this.proc === proc) this.exited(run, describeExit(proc.exitCode, proc.signalCode))
    })
    log.info('engine started', { engine: this.spec.name, pid: proc.pid, port, argv: argv.join(' ') })
  }

  /** It died unasked: say why, forget it, start it again after the backoff. */
  private exited(run: ChildRecord, how: string) {
    if (this.stopping || this.record !== run) return
    this.record = null
    this.proc = null
    this.stopWatch()
    this.removeRecord()
    if (this.timers.nowMs() - run.started_at_ms >= STABLE_MS) this.restarts = 0
    const reason = `the engine ${how}${tailText(this.lastLines())}`
    log.error('engine ended unexpectedly; restarting it', {
      engine: this.spec.name,
      pid: run.pid,
      how,
      restart_in_ms: this.restartDelay(),
    })
    for (const l of this.listeners) l(reason)
    this.scheduleRestart(run.port)
  }

  private restartDelay() {
    return Math.min(RESTART_MAX_MS, RESTART_MIN_MS * 2 ** this.restarts)
  }

  private scheduleRestart(port: number) {
    const delay = this.restartDelay()
    this.restarts++
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null
      if (this.stopping) return
      this.spawn(port, false).catch((e) => {
        log.error('engine restart failed', { engine: this.spec.name, error: (e as Error).message })
        // The port may be taken now: the next try takes another.
        if (!this.stopping) this.scheduleRestart(freePort())
      })
    }, delay)
  }

  /** An adopted process is not our child: its end is seen by looking. */
  private watchAdopted() {
    const run = this.record!
    this.watch = setInterval(() => {
      if (!alive(run.pid)) this.exited(run, 'ended')
    }, WATCH_MS)
    this.watch.unref?.()
  }

  private stopWatch() {
    if (this.watch) clearInterval(this.watch)
    this.watch = null
  }

  private readRecord(): ChildRecord | null {
    const r = this.spec.state.readJson<ChildRecord>(join('engines', `${this.spec.name}.json`))
    return r && Number.isInteger(r.pid) && Number.isInteger(r.port) && Array.isArray(r.argv) ? r : null
  }

  private removeRecord() {
    rmSync(this.recordPath, { force: true })
  }

  /** Keeps the log bounded (engines/engine-log.ts). Cheap when it is within its limit. */
  trimLog() {
    try {
      if (rotateLog(this.logPath, this.spec.log?.maxBytes ?? LOG_MAX_BYTES)) this.rotated = true
    } catch (e) {
      log.warn('could not rotate the engine log', { engine: this.spec.name, error: (e as Error).message })
    }
  }

  /** At start() and on an interval until stop(): the log's size is looked at. */
  private checkLog() {
    this.trimLog()
    if (this.logCheck) return
    this.logCheck = setInterval(() => this.trimLog(), this.spec.log?.checkMs ?? LOG_CHECK_MS)
    this.logCheck.unref?.()
  }
}

const urlOf = (port: number) => `http://127.0.0.1:${port}`

const tailText = (lines: string[]) => (lines.length ? `; its last lines: ${lines.join(' | ')}` : '')

function describeExit(code: number | null, signal: unknown): string {
  return signal ? `was killed (${signal})` : `exited with code ${code}`
}

/** A free loopback port (asked of the kernel, then released for the engine to take). */
export function freePort(): number {
  const listener = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = listener.port
  listener.stop(true)
  return port
}

/**
 * Whether the process runs: a zombie (ended, its parent not yet told — an orphan waits for the
 * system's init to reap it) has given its memory and port back.
 */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    // No /proc (not Linux): the signal said it is there.
    return existsSync('/proc/self') === false
  }
}

/** When a process started (Linux: /proc/<pid>/stat field 22, clock ticks since boot; 100 a second). */
function startedAtMs(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const ticks = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19])
    const boot = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1])
    return Number.isFinite(ticks) && Number.isFinite(boot) ? boot * 1000 + ticks * 10 : null
  } catch {
    return null
  }
}

/** The argv of a live process (Linux /proc), or null. */
export function argvOf(pid: number): string[] | null {
  const path = `/proc/${pid}/cmdline`
  if (!existsSync(path)) return null
  try {
    return readFileSync(path, 'utf8').split('\0').slice(0, -1)
  } catch {
    return null
  }
}

/**
 * Whether `record` is still the process it names (a pid can be reused): its arguments are the
 * recorded ones (argv[0] left out: a script that execs the engine leaves the engine's path there),
 * or — an engine that renames itself — it started when the record says.
 */
export function sameProcess(record: ChildRecord): boolean {
  if (!alive(record.pid)) return false
  const argv = argvOf(record.pid)
  if (argv !== null && sameArgv(argv.slice(1), record.argv.slice(1))) return true
  const started = startedAtMs(record.pid)
  return started !== null && Math.abs(started - record.started_at_ms) < 2000
}

const sameArgv = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i])

/**
 * Signals an engine's process group (it was started as the group's leader), or the process alone
 * when it leads none (started by a daemon from before engines had groups). False: nothing to signal.
 */
export function signalGroup(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pid, signal)
    return true
  } catch {}
  try {
    process.kill(pid, signal)
    return true
  } catch {
    return false
  }
}

/** SIGKILL to whatever is left of an ended engine's group (a group id is not reused while it lives). */
function endGroup(pid: number) {
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {}
}

/** SIGTERM, then SIGKILL if it is still there after the grace; its group goes with it. */
export async function stopPid(pid: number, timers: Timers) {
  if (!signalGroup(pid, 'SIGTERM')) return
  const deadline = timers.nowMs() + STOP_GRACE_MS
  while (alive(pid) && timers.nowMs() < deadline) await timers.sleep(50)
  if (alive(pid)) signalGroup(pid, 'SIGKILL')
  endGroup(pid)
}
