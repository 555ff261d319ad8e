import { existsSync, readdirSync, rmSync, statSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { Engine } from '../../domain/catalogue'
import type { DownloadFile } from '../../domain/downloads'
import { log as rootLog } from '../../lib/logger'
import { realTimers, type Timers } from '../backoff'
import { type ModelLayout, modelsDirLayout } from '../download'
import { runtimeJson } from '../runtimes/types'
import type { StateDir } from '../state'
import { alive, argvOf, type ChildRecord, SupervisedChild, sameProcess, stopPid } from './child'
import { findProgram, renderLaunch, splitCommand, withInterpreter } from './launch-command'
import { modelFiles, scanModels } from './models-dir'
import { type EngineModel, type EngineView, LoadFailed, type ManagedEngine } from './types'

// A per-model launched engine (docs/worker.md "vLLM and other launched engines"): `vllm serve`,
// SGLang, or any OpenAI-compatible server that serves ONE model per process. The daemon starts a
// process per loaded model with the launch command (engines/launch-command.ts) on a free loopback
// port, and stops it to give its VRAM back.
//
// - Models on disk: `<models-dir>/<runtime_model_id>/` (engines/models-dir.ts).
// - Each process is a supervised child (engines/child.ts): recorded in the state directory as
//   `engines/model-<name>.json` (pid, port, argv, start time), with `model-<name>.launch.json`
//   beside it (the model and its params) and its output in `model-<name>.log`. A load resolves once
//   GET /v1/models answers (and names the model, when the command passes {model}).
// - A process that ends unasked is not restarted in the background (its VRAM would be counted as
//   free): the jobs using it are told (onExit, with its last lines) and the model is unloaded; the
//   next job that needs it starts it again, after a backoff (1 s, doubling to 30 s; back to 1 s
//   once a run lasted a minute). A load that fails (the process exits before it answers: a corrupt
//   model, too little memory) fails that job at once with the engine's last lines.
// - start() settles what a killed run left: a recorded process still running the model's launch
//   command as this daemon would run it now, and answering, is adopted; any other process of a
//   record is stopped. Never two processes for one model, nor one the daemon does not know of.
// - The program's `#!` interpreter is resolved before the start (a pip-installed `vllm` is a Python
//   script), so that the process's command line is exactly the one recorded.

const log = rootLog.child({ component: 'engine' })

const LOAD_TIMEOUT_MS = 30 * 60_000
const RESTART_MIN_MS = 1000
const RESTART_MAX_MS = 30_000
const STABLE_MS = 60_000
const LINES_PER_ERROR = 8
/** Longest wait for a dead process's end to be heard (an adopted one is looked at every second). */
const END_HEARD_MS = 3000
const PREFIX = 'model-'

export interface LaunchedEngineOptions {
  /** The engine name reported (vllm, sglang, or --engine for another server). */
  engine: Engine
  state: StateDir
  modelsDir: string
  /** The launch command (validated by options.ts with launchCommandProblem). */
  command: string
  /** More arguments appended to every launch (--engine-args). */
  extraArgs?: string[]
  timers?: Timers
  /** Longest wait for a started process to answer (default 30 min: large weights load slowly). */
  loadTimeoutMs?: number
  /** Each process's environment (engines/env.ts). */
  env?: Record<string, string>
}

interface Launch {
  model: string
  params: Record<string, unknown>
}

interface Running extends Launch {
  child: SupervisedChild
  state: 'loading' | 'loaded'
  startedMs: number
}

export class LaunchedEngine implements ManagedEngine {
  readonly engine: Engine
  /** There is no one URL: each model has its own port (urlOf). */
  readonly baseUrl = 'http://127.0.0.1'
  /** Params reach the engine only through {params} in the command. */
  readonly appliesParams: boolean
  private readonly state: StateDir
  private readonly modelsDir: string
  private readonly words: string[]
  private readonly extraArgs: string[]
  private readonly namesModel: boolean
  private readonly timers: Timers
  private readonly loadTimeoutMs: number
  private readonly env: Record<string, string> | undefined
  private readonly running = new Map<string, Running>()
  /** The last process of each model, kept for its output after it ended. */
  private readonly lastChild = new Map<string, SupervisedChild>()
  private readonly failed = new Map<string, string>()
  private readonly crashes = new Map<string, { count: number; atMs: number }>()
  private readonly exitListeners = new Set<(reason: string, models: string[] | null) => void>()
  /**
   * docs/worker.md "Downloads": a model is a directory `<models-dir>/<runtime_model_id>/` whatever
   * its files, each at its repository path (an engine reads the whole directory).
   */
  readonly layoutFor: (name: string, files: readonly DownloadFile[]) => ModelLayout

  constructor(o: LaunchedEngineOptions) {
    this.engine = o.engine
    this.state = o.state
    this.modelsDir = resolve(o.modelsDir)
    const modelsDir = this.modelsDir
    this.layoutFor = (name, files) => modelsDirLayout(modelsDir, name, files, { directory: true })
    this.words = splitCommand(o.command)
    this.extraArgs = o.extraArgs ?? []
    this.appliesParams = this.words.includes('{params}')
    this.namesModel = this.words.some((w) => w.includes('{model}'))
    this.timers = o.timers ?? realTimers
    this.loadTimeoutMs = o.loadTimeoutMs ?? LOAD_TIMEOUT_MS
    this.env = o.env
  }

  async start(): Promise<void> {
    if (!existsSync(this.modelsDir) || !statSync(this.modelsDir).isDirectory())
      throw new Error(`--models-dir ${this.modelsDir}: no such directory`)
    const program = this.words[0]!
    if (!findProgram(program))
      throw new Error(
        `${program}: no such program (install the engine, or give its command with --launch-command)`,
      )
    await this.settleLeftovers()
  }

  async stop(): Promise<void> {
    const all = [...this.running.values()]
    this.running.clear()
    await Promise.all(all.map((r) => this.end(r)))
  }

  onExit(listener: (reason: string, models: string[] | null) => void) {
    this.exitListeners.add(listener)
  }

  urlOf(name: string): string {
    return this.running.get(name)?.child.url ?? this.baseUrl
  }

  async status(): Promise<EngineView> {
    await this.endsHeard()
    let onDisk: Map<string, string>
    try {
      onDisk = scanModels(this.modelsDir)
    } catch (e) {
      return { status: 'error', error: `cannot read ${this.modelsDir}: ${(e as Error).message}`, models: [] }
    }
    const models: EngineModel[] = []
    for (const [name, dir] of onDisk) {
      const run = this.running.get(name)
      const error = this.failed.get(name)
      models.push({
        name,
        state: run ? run.state : error ? 'failed' : 'unloaded',
        files: modelFiles(dir),
        ...(!run && error ? { error } : {}),
      })
    }
    // A running model whose directory went away still holds its VRAM: it stays in the table.
    for (const [name, run] of this.running)
      if (!onDisk.has(name)) models.push({ name, state: run.state, files: [] })
    return { status: 'online', models }
  }

  async load(name: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<void> {
    const run = this.running.get(name)
    if (run?.state === 'loaded') return
    if (run) throw new LoadFailed(`${name} is being loaded already`)
    const dir = scanModels(this.modelsDir).get(name)
    if (!dir) throw new LoadFailed(`${name} is not in ${this.modelsDir}`)
    await this.backoff(name, signal)
    const launch: Launch = { model: name, params }
    const child = this.child(launch, dir)
    const entry: Running = { ...launch, child, state: 'loading', startedMs: this.timers.nowMs() }
    this.running.set(name, entry)
    this.lastChild.set(name, child)
    this.failed.delete(name)
    this.state.writeJson(launchFile(childName(name)), launch)
    try {
      await child.start()
      if (this.running.get(name) !== entry) throw new Error('it was stopped before it answered')
      await this.checkServes(name, child.url)
    } catch (e) {
      if (this.running.get(name) === entry) this.running.delete(name)
      await this.end(entry)
      const why = (e as Error).message
      this.failed.set(name, why)
      throw new LoadFailed(why)
    }
    entry.state = 'loaded'
  }

  async unload(name: string): Promise<void> {
    const run = this.running.get(name)
    if (!run) return
    this.running.delete(name)
    await this.end(run)
  }

  lastLines(name?: string): string {
    const children = name ? [this.lastChild.get(name)] : [...this.lastChild.values()]
    return children
      .flatMap((c) => c?.lastLines(undefined, LINES_PER_ERROR) ?? [])
      .slice(-LINES_PER_ERROR)
      .join(' | ')
  }

  /** vLLM's max_num_seqs, SGLang's max_running_requests, when the profile sets them. */
  async slots(name: string): Promise<number | null> {
    const params = this.running.get(name)?.params ?? {}
    const n = params.max_num_seqs ?? params.max_running_requests
    return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : null
  }

  /** The model's process, supervised; its end unasked is a lost model, not a restart. */
  private child(launch: Launch, dir: string): SupervisedChild {
    const name = childName(launch.model)
    const child = new SupervisedChild({
      name,
      state: this.state,
      timers: this.timers,
      readyTimeoutMs: this.loadTimeoutMs,
      ...(this.env ? { env: this.env } : {}),
      command: (port) => this.argv(launch, dir, port),
      ready: async (url) => {
        await runtimeJson(`${url}/v1/models`, { timeoutMs: 2000 })
        return true
      },
    })
    child.onExit((reason) => {
      const run = this.running.get(launch.model)
      if (run?.child !== child) return
      this.running.delete(launch.model)
      // Stopped before its restart is due: the model manager decides when it runs again.
      void child.stop()
      this.forget(name)
      this.crashed(launch.model, run.startedMs)
      const why = `${launch.model}: ${reason}`
      this.failed.set(launch.model, why)
      for (const l of this.exitListeners) l(why, [launch.model])
    })
    return child
  }

  private argv(launch: Launch, dir: string, port: number): string[] {
    const [program, ...rest] = renderLaunch(
      this.words,
      { model_path: dir, model: launch.model, port, params: launch.params },
      this.extraArgs,
    )
    return [...withInterpreter(program!), ...rest]
  }

  /**
   * A loaded model whose process is gone, its end not heard yet (a child's exit is handled on a
   * later turn; an adopted one's at the next look): waits until it is, so that whoever asks — a job
   * whose requests just failed — learns why, in the engine's words, and never that it is loaded.
   */
  private async endsHeard() {
    for (const [name, run] of this.running) {
      const pid = run.child.pid
      if (run.state !== 'loaded' || pid === null || alive(pid)) continue
      const deadline = this.timers.nowMs() + END_HEARD_MS
      while (this.running.get(name) === run && this.timers.nowMs() < deadline) await this.timers.sleep(10)
    }
  }

  /** When the command names the model, the engine must serve that name (requests carry it). */
  private async checkServes(name: string, url: string) {
    if (!this.namesModel) return
    const list = await runtimeJson<{ data?: { id?: unknown }[] }>(`${url}/v1/models`, { timeoutMs: 5000 })
    const ids = (list.data ?? []).map((m) => m.id).filter((id) => typeof id === 'string')
    if (!ids.includes(name))
      throw new Error(
        `the engine serves ${ids.length ? ids.join(', ') : 'no model'}, not ${name}: does the launch command pass {model} as its served model name?`,
      )
  }

  private async end(run: Running) {
    await run.child.stop()
    this.forget(childName(run.model))
  }

  private forget(name: string) {
    rmSync(join(this.state.dir, launchFile(name)), { force: true })
  }

  /** Counts an end unasked; a run that lasted STABLE_MS starts the count over. */
  private crashed(model: string, startedMs: number) {
    const now = this.timers.nowMs()
    const last = now - startedMs >= STABLE_MS ? 0 : (this.crashes.get(model)?.count ?? 0)
    this.crashes.set(model, { count: last + 1, atMs: now })
  }

  private async backoff(model: string, signal?: AbortSignal) {
    const c = this.crashes.get(model)
    if (!c) return
    const delay = Math.min(RESTART_MAX_MS, RESTART_MIN_MS * 2 ** (c.count - 1))
    const left = c.atMs + delay - this.timers.nowMs()
    if (left <= 0) return
    log.info(
      `${model} ended ${c.count === 1 ? 'once' : `${c.count} times`}; starting it again in ${left} ms`,
      {
        model,
        restart_in_ms: left,
      },
    )
    await this.timers.sleep(left, signal)
    signal?.throwIfAborted()
  }

  /**
   * The processes a killed run left (records in the state directory): adopted when still running
   * the model's command as this daemon would run it now and answering, else stopped.
   */
  private async settleLeftovers() {
    const enginesDir = join(this.state.dir, 'engines')
    let files: string[] = []
    try {
      files = readdirSync(enginesDir)
    } catch {}
    const names = new Set(
      files
        .filter((f) => f.startsWith(PREFIX) && f.endsWith('.json'))
        .map((f) => f.replace(/(\.launch)?\.json$/, '')),
    )
    const onDisk = names.size ? scanModels(this.modelsDir) : new Map<string, string>()
    for (const name of names) {
      const record = this.state.readJson<ChildRecord>(join('engines', `${name}.json`))
      const launch = this.state.readJson<Launch>(launchFile(name))
      const valid =
        record && Number.isInteger(record.pid) && Number.isInteger(record.port) && Array.isArray(record.argv)
      if (valid && launch && typeof launch.model === 'string' && childName(launch.model) === name) {
        const dir = onDisk.get(launch.model)
        const params = launch.params && typeof launch.params === 'object' ? launch.params : {}
        if (dir && (await this.adoptable(record, { model: launch.model, params }, dir))) {
          const child = this.child({ model: launch.model, params }, dir)
          await child.start()
          if (child.adopted) {
            this.running.set(launch.model, {
              model: launch.model,
              params,
              child,
              state: 'loaded',
              startedMs: record.started_at_ms,
            })
            this.lastChild.set(launch.model, child)
            continue
          }
          // It ended between the look and the adoption: what start() spawned instead goes too.
          await child.stop()
        }
      }
      if (valid && sameProcess(record)) {
        log.warn('stopping an engine a previous run left (another command, or not answering)', {
          model: launch?.model,
          pid: record.pid,
          argv: record.argv.join(' '),
        })
        await stopPid(record.pid, this.timers)
      }
      rmSync(join(enginesDir, `${name}.json`), { force: true })
      this.forget(name)
    }
  }

  private async adoptable(record: ChildRecord, launch: Launch, dir: string): Promise<boolean> {
    const live = argvOf(record.pid)
    if (!alive(record.pid) || !live || !sameArgv(live.slice(1), record.argv.slice(1))) return false
    if (!sameArgv(this.argv(launch, dir, record.port), record.argv)) return false
    try {
      await this.checkServes(launch.model, `http://127.0.0.1:${record.port}`)
      if (!this.namesModel)
        await runtimeJson(`http://127.0.0.1:${record.port}/v1/models`, { timeoutMs: 2000 })
      return true
    } catch {
      return false
    }
  }
}

const launchFile = (name: string) => join('engines', `${name}.launch.json`)

/** A file name for the model's records: readable, and distinct for names that read alike. */
export function childName(model: string): string {
  const hash = new Bun.CryptoHasher('sha256').update(model).digest('hex').slice(0, 8)
  return `${PREFIX}${model.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80)}-${hash}`
}

const sameArgv = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i])
