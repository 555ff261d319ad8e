import { closeSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { log as rootLog } from '../../lib/logger'
import { every, RestartBackoff, realTimers, type Timers } from '../backoff'
import type { StateDir } from '../state'
import { beginLog, LOG_CHECK_MS, LOG_MAX_BYTES, lastLogLines, openLog, rotateLog } from './engine-log'
import { engineEnv, redactArgv } from './env'

// An engine process the daemon owns, for both engine kinds (ARCHITECTURE.md's supervisor rule,
// docs/worker.md "Managed engines"): Erlang's supervisor and systemd's KillMode=control-group in
// small. llama.cpp's router is one (restarted when it dies); each model of a launched engine is one
// (started again when a job needs it). What both decide is decided here, once:
//
// - Its state is one of PROCESS_STATES and moves only along PROCESS_MOVES (llama-swap's
//   process.go): stopped → starting → ready → stopping → stopped; an adoption is stopped → ready.
//   The process owns its moves: callers ask start() or stop(), never look first.
// - Recorded: `<state_dir>/engines/<name>.json` holds its pid, port, argv, the variables set for it
//   and its start time while it runs; its output (stdout and stderr, with its own children's) goes
//   to `<name>.log` beside it, so that what it said survives this daemon and can be quoted in errors;
//   that log is appended to and bounded by size (engines/engine-log.ts), checked every LOG_CHECK_MS
//   while a run lasts. A fresh start keeps the last run's output as `.log.1`.
// - Its environment: the daemon's allow-list (engines/env.ts, given as `env`), with the variables
//   `vars()` names (its GPU set, a launch command's `env K=V`) set on top; never the daemon's whole
//   environment.
// - Ended as a group: it is started as the leader of its own process group, and every way it ends —
//   stopped (SIGTERM, SIGKILL after a grace), dead (its API process crashed: vLLM's EngineCore and
//   tensor-parallel workers, a router's model processes live on), a start that failed or went
//   silent — ends the whole group, and the state is `stopped` only once no process of the group is
//   left: until then the memory its processes hold is not free.
// - A start waits for ready() while the process keeps talking: `silenceMs` without a new line of
//   output (docs/worker.md --load-timeout; Ollama's rule: a slow disk that progresses never times
//   out, a hang is caught) ends it.
// - Dead unasked: the listeners hear why (its last lines), once its group is gone. `restart:
//   'always'` starts it again after the back-off (backoff.ts RestartBackoff); `'never'` leaves that
//   to the next start(), which waits out the same back-off.
// - Adopted or stopped at the next start (adopt(), the one rule): a daemon that was killed leaves
//   its child running. A recorded process that is still the one recorded (its command line, or its
//   start time), runs the command and variables this daemon would use now, and answers, is
//   adopted; any other still running is stopped; a pid now held by another process is left alone.
//   Never two engines for one record.

const log = rootLog.child({ component: 'engine' })

export const PROCESS_STATES = ['stopped', 'starting', 'ready', 'stopping'] as const
export type ProcessState = (typeof PROCESS_STATES)[number]

/** Who makes each move. */
export const PROCESS_MOVES: Record<ProcessState, readonly ProcessState[]> = {
  // start() spawns it; adopt() takes over what a killed run left, already answering.
  stopped: ['starting', 'ready'],
  // It answered; or it died first, went silent past its limit, or stop() was asked meanwhile.
  starting: ['ready', 'stopping'],
  // stop() was asked, or it died unasked (the rest of its group is ended).
  ready: ['stopping'],
  // No process of its group is left.
  stopping: ['stopped'],
}

export class IllegalProcessMove extends Error {}

export function checkProcessMove(from: ProcessState, to: ProcessState) {
  if (!PROCESS_MOVES[from].includes(to))
    throw new IllegalProcessMove(`illegal engine process state change ${from} → ${to}`)
}

export interface ChildRecord {
  pid: number
  port: number
  /** The argv it was started with, binary first. */
  argv: string[]
  /** The variables set for it on top of the daemon's (its GPU set, a launch command's `env K=V`). */
  env?: Record<string, string>
  started_at_ms: number
}

export interface ChildSpec {
  /** Its name in the state directory (engines/<name>.json, .log). */
  name: string
  state: StateDir
  /** The argv (binary first) of a start listening on `port`. */
  command(port: number): string[]
  /** Its environment (engines/env.ts); default: the daemon's allow-list with no names added. */
  env?: Record<string, string>
  /** Variables set for it on top of `env` (the GPU set; `env K=V` of a command); recorded with it. */
  vars?(): Record<string, string>
  /** Called before each spawn (not before an adoption). */
  beforeSpawn?(): void
  /** Whether it answers at `url` (polled after a start until it does). */
  ready(url: string): Promise<boolean>
  /** Whether what a killed run left at `url` serves what this daemon wants (default: ready()). */
  adoptable?(url: string): Promise<boolean>
  /** Longest silence (no new output) while it starts, before it is given up (default 60 s). */
  silenceMs?: number
  /** After an unasked end: started again after the back-off ('always', the default), or at the next start(). */
  restart?: 'always' | 'never'
  timers?: Timers
  /** Its log's size limit and how often it is checked (engines/engine-log.ts; tests shrink them). */
  log?: { maxBytes: number; checkMs: number }
}

/** A start given up: the process went silent for longer than its limit before it answered. */
export class StartTimeout extends Error {
  constructor(
    readonly silentSeconds: number,
    readonly lastLines: string[],
    /** Its argv, credentials redacted (engines/env.ts). */
    readonly argv: string[] = [],
  ) {
    super(`no output for ${silentSeconds} s`)
  }

  /** What the engine said last (its last `n` lines), or, when it wrote nothing, how it was started: never empty. */
  said(n: number): string {
    return this.lastLines.length
      ? `the engine's last lines: ${this.lastLines.slice(-n).join(' | ')}`
      : `the engine wrote nothing; its command: ${this.argv.join(' ')}`
  }
}

const STOP_GRACE_MS = 10_000
/** How long an ended group's processes may take to be gone (SIGKILL is not caught; a process in the kernel finishes its call first). */
const GROUP_GONE_MS = 30_000
const WATCH_MS = 1000

/** One run: a process started (or adopted) and what ends it. */
interface Run {
  record: ChildRecord
  /** The process, when this daemon started it (an adopted one is not our child). */
  proc: Subprocess | null
  /** Aborted when the run ends: its watchers and its log check stop. */
  over: AbortController
  /** The end under way (unasked), so that whoever looks meanwhile waits for the same one. */
  ending: Promise<void> | null
}

export class SupervisedChild {
  private current: ProcessState = 'stopped'
  private run: Run | null = null
  private starting: Promise<void> | null = null
  /** Aborted by stop(): a start under way gives up, a restart waiting is dropped. */
  private stopAsked = new AbortController()
  private readonly listeners = new Set<(reason: string) => void>()
  private readonly timers: Timers
  private readonly backoff = new RestartBackoff()
  /** Whether the running process was found, not started, by this daemon. */
  adopted = false
  private lastPort = 0
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

  get state(): ProcessState {
    return this.current
  }

  /** Where it listens (while it restarts: where it listened last). */
  get url(): string {
    return urlOf(this.run?.record.port ?? this.lastPort)
  }

  get pid(): number | null {
    return this.run?.record.pid ?? null
  }

  /** Whether it runs and has answered. */
  get running(): boolean {
    return this.current === 'ready'
  }

  /** Called when it dies unasked, with why (its last lines), once its group is gone. */
  onExit(listener: (reason: string) => void) {
    this.listeners.add(listener)
  }

  /**
   * Makes it ready: nothing when it is; joins a start under way; else adopts what a killed run left
   * (when adopt() says so) or starts it, after what is left of the back-off.
   */
  start(signal?: AbortSignal): Promise<void> {
    if (this.current === 'ready') return Promise.resolve()
    this.starting ??= this.startOnce(signal).finally(() => {
      this.starting = null
    })
    return this.starting
  }

  private async startOnce(signal?: AbortSignal) {
    if (this.stopAsked.signal.aborted) this.stopAsked = new AbortController()
    // An unasked end under way finishes first (its group is being ended).
    await this.run?.ending
    if (await this.adopt()) return
    const left = this.backoff.leftMs(this.timers.nowMs())
    if (left > 0) {
      log.info(
        `${this.spec.name} ended ${this.backoff.count === 1 ? 'once' : `${this.backoff.count} times`}; starting it again in ${left} ms`,
        { engine: this.spec.name, restart_in_ms: left },
      )
      await this.timers.sleep(left, AbortSignal.any([this.stopAsked.signal, ...(signal ? [signal] : [])]))
      signal?.throwIfAborted()
      if (this.stopAsked.signal.aborted) throw new Error(`${this.spec.name} was stopped before it started`)
    }
    await this.spawn(this.lastPort || freePort())
  }

  /**
   * What a killed run left (the record in the state directory), settled by the one rule: adopted
   * when it is still the recorded process, runs the command and variables this daemon would use now
   * and answers (true); stopped when it is still the recorded process but not that; left alone when
   * its pid is now another process's. The record is dropped unless adopted.
   */
  async adopt(): Promise<boolean> {
    if (this.current !== 'stopped') return this.current === 'ready'
    const left = this.readRecord()
    if (!left) return false
    if (sameProcess(left)) {
      const wanted = this.spec.command(left.port)
      const sameEnv = sameVars(left.env ?? {}, this.spec.vars?.() ?? {})
      const probe = this.spec.adoptable ?? this.spec.ready
      if (sameArgv(wanted, left.argv) && sameEnv && (await probe(urlOf(left.port)).catch(() => false))) {
        this.move('ready')
        this.adopted = true
        this.lastPort = left.port
        const run: Run = { record: left, proc: null, over: new AbortController(), ending: null }
        this.run = run
        this.checkLog(run)
        void this.watchAdopted(run)
        log.info('adopted the engine a previous run left', {
          engine: this.spec.name,
          pid: left.pid,
          port: left.port,
          since: new Date(left.started_at_ms).toISOString(),
        })
        return true
      }
      log.warn('stopping an engine a previous run left (another command, or not answering)', {
        engine: this.spec.name,
        pid: left.pid,
        argv: redactArgv(left.argv).join(' '),
      })
      await stopPid(left.pid, this.timers)
    }
    this.lastPort = left.port
    this.removeRecord()
    return false
  }

  /** Stops it (SIGTERM, then SIGKILL after a grace), ends its group and forgets it. */
  async stop(): Promise<void> {
    this.stopAsked.abort()
    await this.starting?.catch(() => {})
    const run = this.run
    if (!run) return
    if (run.ending) return run.ending
    if (this.current !== 'ready') return
    this.move('stopping')
    run.over.abort()
    const pid = run.record.pid
    if (run.proc) {
      const proc = run.proc
      if (proc.exitCode === null && proc.signalCode === null) {
        signalGroup(pid, 'SIGTERM')
        const ended = await Promise.race([
          proc.exited.then(() => true),
          this.timers.sleep(STOP_GRACE_MS).then(() => false),
        ])
        if (!ended) {
          signalGroup(pid, 'SIGKILL')
          await proc.exited
        }
      }
      // What the engine started and left behind (a worker that ignored SIGTERM) goes with it.
      await endGroup(pid, this.timers)
    } else await stopPid(pid, this.timers)
    this.finish(run)
    log.info('engine stopped', { engine: this.spec.name, pid })
  }

  /**
   * Whether it is ready and its process is alive. A process found dead that was not heard of yet
   * (a child's exit is handled on a later turn; an adopted one's at the next look) is ended now, so
   * that whoever asks — a job whose requests just failed — learns why, and never that it runs.
   */
  async confirmRunning(): Promise<boolean> {
    const run = this.run
    if (run?.ending) await run.ending
    if (!run || this.current !== 'ready') return false
    if (alive(run.record.pid)) return true
    // Our child's own account of its end, when it is ours (an adopted one just ended).
    const proc = run.proc
    if (proc) await proc.exited
    await this.ended(run, proc ? describeExit(proc.exitCode, proc.signalCode) : 'ended')
    return false
  }

  /** The last `n` lines of its output that `keep` accepts (all when not given). */
  lastLines(keep: (line: string) => boolean = () => true, n = 12): string[] {
    this.trimLog()
    return lastLogLines(this.logPath, { keep, n, older: this.rotated })
  }

  /** The size of its output so far: what changes while it makes progress (a rotation included). */
  outputSize(): number {
    try {
      return statSync(this.logPath).size
    } catch {
      return 0
    }
  }

  private move(next: ProcessState) {
    checkProcessMove(this.current, next)
    this.current = next
  }

  private async spawn(port: number): Promise<void> {
    const argv = this.spec.command(port)
    const extra = this.spec.vars?.() ?? {}
    this.spec.beforeSpawn?.()
    // A fresh start (not a restart after an end) begins a fresh log, the last run's kept as .log.1:
    // the lines quoted in errors are this run's.
    if (this.backoff.count === 0) {
      beginLog(this.logPath)
      this.rotated = false
    }
    const fd = openLog(this.logPath)
    let proc: Subprocess
    try {
      // Its own process group: ending it ends what it starts too (a router's model processes,
      // vLLM's EngineCore and workers), and a Ctrl-C at the daemon's terminal reaches the daemon,
      // which stops it. Its environment: the allow-list, with `extra` (the GPU set) set on top.
      proc = Bun.spawn(argv, {
        stdin: 'ignore',
        stdout: fd,
        stderr: fd,
        env: { ...(this.spec.env ?? engineEnv(process.env)), ...extra },
        detached: true,
      })
    } catch (e) {
      throw new Error(`could not start ${argv[0]}: ${(e as Error).message}`)
    } finally {
      closeSync(fd)
    }
    this.move('starting')
    this.adopted = false
    const record: ChildRecord = {
      pid: proc.pid,
      port,
      argv,
      ...(Object.keys(extra).length ? { env: extra } : {}),
      started_at_ms: this.timers.nowMs(),
    }
    const run: Run = { record, proc, over: new AbortController(), ending: null }
    this.run = run
    this.lastPort = port
    this.checkLog(run)
    this.spec.state.writeJson(join('engines', `${this.spec.name}.json`), record)
    try {
      await this.waitReady(run, argv[0]!)
    } catch (e) {
      this.move('stopping')
      run.over.abort()
      if (proc.exitCode === null && proc.signalCode === null) signalGroup(proc.pid, 'SIGKILL')
      await proc.exited
      await endGroup(proc.pid, this.timers)
      this.finish(run)
      throw e
    }
    this.move('ready')
    // From here on its end is unasked unless stop() began it.
    void proc.exited.then(() => {
      if (this.run === run && this.current === 'ready')
        void this.ended(run, describeExit(proc.exitCode, proc.signalCode))
    })
    log.info('engine started', {
      engine: this.spec.name,
      pid: proc.pid,
      port,
      argv: redactArgv(argv).join(' '),
      // Variables by name only: a value (an `env K=V` of the launch command) may be a credential.
      ...(Object.keys(extra).length ? { env: Object.keys(extra) } : {}),
    })
  }

  /** Polls ready() while the process runs and talks; throws when it ends, is stopped or goes silent. */
  private async waitReady(run: Run, program: string) {
    const proc = run.proc!
    const silenceMs = this.spec.silenceMs ?? 60_000
    let heardMs = this.timers.nowMs()
    let size = this.outputSize()
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null)
        throw new Error(
          `${program} ${describeExit(proc.exitCode, proc.signalCode)} before answering${tailText(this.lastLines())}`,
        )
      if (this.stopAsked.signal.aborted) throw new Error(`${program} was stopped before it answered`)
      if (await this.spec.ready(urlOf(run.record.port)).catch(() => false)) return
      const now = this.timers.nowMs()
      const grown = this.outputSize()
      if (grown !== size) {
        size = grown
        heardMs = now
      } else if (now - heardMs > silenceMs)
        throw new StartTimeout(
          Math.round((now - heardMs) / 1000),
          this.lastLines(),
          redactArgv(run.record.argv),
        )
      await this.timers.sleep(50, this.stopAsked.signal)
    }
  }

  /** It died unasked: end its group, forget it, tell the listeners; restart it when that is its policy. */
  private ended(run: Run, how: string): Promise<void> {
    run.ending ??= (async () => {
      this.move('stopping')
      run.over.abort()
      await endGroup(run.record.pid, this.timers)
      this.finish(run)
      this.backoff.ended(run.record.started_at_ms, this.timers.nowMs())
      const reason = `the engine ${how}${tailText(this.lastLines())}`
      const again =
        (this.spec.restart ?? 'always') === 'always' &&
        !this.stopAsked.signal.aborted &&
        !this.backoff.exhausted
      log.error(again ? 'engine ended unexpectedly; restarting it' : 'engine ended unexpectedly', {
        engine: this.spec.name,
        pid: run.record.pid,
        how,
        ...(again ? { restart_in_ms: this.backoff.delayMs } : {}),
      })
      for (const l of this.listeners) l(reason)
      if (again) void this.restartLoop()
    })()
    return run.ending
  }

  /**
   * Starts it again until it runs, stop() is asked, or the back-off gives up (each try after the
   * back-off; RestartBackoff.GIVE_UP_AFTER ends in a row): a router that dies at every start is not
   * started forever, and the log says why it was left stopped.
   */
  private async restartLoop() {
    const stopped = this.stopAsked.signal
    while (!stopped.aborted && this.current === 'stopped') {
      try {
        await this.start()
      } catch (e) {
        if (stopped.aborted) return
        const error = (e as Error).message
        // The port may be taken now: the next try takes another.
        this.lastPort = 0
        this.backoff.ended(this.timers.nowMs(), this.timers.nowMs())
        if (this.backoff.exhausted) {
          log.error('engine restart given up; it starts again when next needed', {
            engine: this.spec.name,
            ends_in_a_row: this.backoff.count,
            error,
          })
          return
        }
        log.error('engine restart failed', {
          engine: this.spec.name,
          error,
          restart_in_ms: this.backoff.delayMs,
        })
      }
    }
  }

  private finish(run: Run) {
    if (this.run === run) {
      this.run = null
      this.removeRecord()
    }
    this.move('stopped')
  }

  /** An adopted process is not our child: its end is seen by looking. */
  private async watchAdopted(run: Run) {
    while (!run.over.signal.aborted) {
      await this.timers.sleep(WATCH_MS, run.over.signal)
      if (run.over.signal.aborted || this.run !== run) return
      if (!alive(run.record.pid)) return void this.ended(run, 'ended')
    }
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

  /** While a run lasts its log's size is looked at on an interval (the run's end stops it). */
  private checkLog(run: Run) {
    this.trimLog()
    every(this.timers, this.spec.log?.checkMs ?? LOG_CHECK_MS, () => this.trimLog(), run.over.signal)
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
const sameVars = (a: Record<string, string>, b: Record<string, string>) =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(a).every(([k, v]) => b[k] === v)

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

/**
 * The live processes of process group `pgid` (Linux: /proc/<pid>/stat's pgrp; zombies, which hold
 * nothing, left out). Elsewhere: the group itself when a signal can reach it.
 */
export function groupMembers(pgid: number): number[] {
  let pids: string[]
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p))
  } catch {
    try {
      process.kill(-pgid, 0)
      return [pgid]
    } catch {
      return []
    }
  }
  const out: number[] = []
  for (const p of pids) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (Number(pgrp) === pgid && state !== 'Z') out.push(Number(p))
    } catch {}
  }
  return out
}

/**
 * Ends whatever is left of an ended engine's group (SIGKILL; a group id is not reused while one of
 * its processes lives) and waits until none is left. A process the kernel holds (uninterruptible:
 * a driver call) may take a moment; one that outlives GROUP_GONE_MS is logged, and its memory is
 * still seen by the driver's own figures (models/plan.ts takes the smaller).
 */
export async function endGroup(pgid: number, timers: Timers): Promise<void> {
  const deadline = timers.nowMs() + GROUP_GONE_MS
  for (let wait = 5; ; wait = Math.min(200, wait * 2)) {
    try {
      process.kill(-pgid, 'SIGKILL')
    } catch {}
    const left = groupMembers(pgid)
    if (left.length === 0) return
    if (timers.nowMs() > deadline) {
      log.error('processes of an ended engine did not end', { pgid, pids: left })
      return
    }
    await timers.sleep(wait)
  }
}

/** SIGKILL to one process (a router's model process: a member of the router's group), until it is gone. */
export async function endProcess(pid: number, timers: Timers): Promise<void> {
  const deadline = timers.nowMs() + GROUP_GONE_MS
  for (let wait = 5; alive(pid); wait = Math.min(200, wait * 2)) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
    if (timers.nowMs() > deadline) {
      log.error('a process of the engine did not end', { pid })
      return
    }
    await timers.sleep(wait)
  }
}

/** SIGTERM, then SIGKILL if it is still there after the grace; its group goes with it. */
export async function stopPid(pid: number, timers: Timers) {
  if (!signalGroup(pid, 'SIGTERM')) return
  const deadline = timers.nowMs() + STOP_GRACE_MS
  while (alive(pid) && timers.nowMs() < deadline) await timers.sleep(50)
  if (alive(pid)) signalGroup(pid, 'SIGKILL')
  await endGroup(pid, timers)
}
