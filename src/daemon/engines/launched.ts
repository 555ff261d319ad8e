import { existsSync, readdirSync, rmSync, statSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { Engine } from '../../domain/catalogue'
import type { DownloadFile } from '../../domain/downloads'
import { realTimers, type Timers } from '../backoff'
import { type ModelLayout, modelsDirLayout } from '../download'
import { gpuEnv } from '../gpu'
import { runtimeJson } from '../runtimes/types'
import type { StateDir } from '../state'
import { StartTimeout, SupervisedChild } from './child'
import { findProgram, renderLaunch, splitCommand, splitEnv, withInterpreter } from './launch-command'
import { modelFiles, scanModels } from './models-dir'
import {
  type EngineModel,
  type EngineView,
  LoadFailed,
  type LoadPlacement,
  type ManagedEngine,
} from './types'

// A per-model launched engine (docs/worker.md "vLLM and other launched engines"): `vllm serve`,
// SGLang, or any OpenAI-compatible server that serves ONE model per process. The daemon starts a
// process per loaded model with the launch command (engines/launch-command.ts) on a free loopback
// port and the GPU set the model manager chose (CUDA_VISIBLE_DEVICES), and stops it to give its
// memory back.
//
// - Models on disk: `<models-dir>/<runtime_model_id>/` (engines/models-dir.ts).
// - Each model's process is a supervised child (engines/child.ts, the supervisor both engine kinds
//   share: its states, its group ended on every end, its back-off, its adoption rule): recorded in
//   the state directory as `engines/model-<name>.json` (pid, port, argv, variables, start time),
//   with `model-<name>.launch.json` beside it (the model, its params and GPUs) and its output in
//   `model-<name>.log`. A load resolves once GET /v1/models answers (and names the model, when the
//   command passes {model}); one that stays silent for the load timeout is given up.
// - A process that ends unasked is not restarted in the background (its memory would be counted as
//   free): once its group is gone the jobs using it are told (onExit, with its last lines) and the
//   model is unloaded; the next job that needs it starts it again, after the supervisor's back-off.
//   A load that fails (the process exits before it answers: a corrupt model, too little memory)
//   fails that job at once with the engine's last lines.
// - start() settles what a killed run left, by the supervisor's one rule: a recorded process still
//   running the model's launch command as this daemon would run it now, on the same GPUs, and
//   answering, is adopted; any other process of a record is stopped. Never two processes for one
//   model's copy, nor one the daemon does not know of.
// - Copies (docs/worker.md "GPUs"): a model may run in more than one process at once, each on its
//   own GPUs and port, with the same served name; the model manager names the further ones
//   copyName(model, n) and each is a process, a record and a log of its own.
// - The program's `#!` interpreter is resolved before the start (a pip-installed `vllm` is a Python
//   script), and a leading `env NAME=VALUE` is applied through the spawn's environment, so that the
//   process's command line is exactly the one recorded.

/** docs/worker.md --load-timeout: the default silence a load may keep (a 70B model from a network disk). */
export const DEFAULT_LOAD_TIMEOUT_MS = 15 * 60_000
const LINES_PER_ERROR = 8
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
  /** Longest a starting process may stay silent before its load is given up (--load-timeout). */
  loadTimeoutMs?: number
  /** Each process's environment (engines/env.ts). */
  env?: Record<string, string>
}

interface Launch {
  model: string
  /** The copy's name (engines/types.ts copyName) when it is a further copy; absent for the model's own. */
  instance?: string
  params: Record<string, unknown>
  /** Its GPU set (nvidia-smi indices); null: none given. */
  gpus?: number[] | null
}

/** A model's process and what it runs. */
interface Proc {
  child: SupervisedChild
  launch: Launch
  dir: string
}

export class LaunchedEngine implements ManagedEngine {
  readonly engine: Engine
  /** There is no one URL: each model has its own port (urlOf). */
  readonly baseUrl = 'http://127.0.0.1'
  /** Params reach the engine only through {params} in the command. */
  readonly appliesParams: boolean
  readonly copies = true
  private readonly state: StateDir
  private readonly modelsDir: string
  private readonly words: string[]
  /** `env NAME=VALUE` of the launch command: set through the spawn's environment. */
  private readonly commandEnv: Record<string, string>
  private readonly extraArgs: string[]
  private readonly namesModel: boolean
  private readonly timers: Timers
  private readonly loadTimeoutMs: number
  private readonly env: Record<string, string> | undefined
  /** Every model's (and copy's) process by its name, kept after it ends (its output, its back-off). */
  private readonly procs = new Map<string, Proc>()
  private readonly failed = new Map<string, string>()
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
    const { env, words } = splitEnv(splitCommand(o.command))
    this.words = words
    this.commandEnv = env
    this.extraArgs = o.extraArgs ?? []
    this.appliesParams = this.words.includes('{params}')
    this.namesModel = this.words.some((w) => w.includes('{model}'))
    this.timers = o.timers ?? realTimers
    this.loadTimeoutMs = o.loadTimeoutMs ?? DEFAULT_LOAD_TIMEOUT_MS
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
    await Promise.all([...this.procs.values()].map((p) => this.end(p)))
  }

  onExit(listener: (reason: string, models: string[] | null) => void) {
    this.exitListeners.add(listener)
  }

  urlOf(name: string): string {
    const p = this.procs.get(name)
    return p && p.child.state !== 'stopped' ? p.child.url : this.baseUrl
  }

  async status(): Promise<EngineView> {
    // A process found dead whose end was not heard yet is ended now (its group first): whoever
    // asks — a job whose requests just failed — learns why, in the engine's words.
    await Promise.all([...this.procs.values()].map((p) => p.child.confirmRunning()))
    let onDisk: Map<string, string>
    try {
      onDisk = scanModels(this.modelsDir)
    } catch (e) {
      return { status: 'error', error: `cannot read ${this.modelsDir}: ${(e as Error).message}`, models: [] }
    }
    const models: EngineModel[] = []
    for (const [name, dir] of onDisk) {
      const state = this.stateOf(name)
      const error = this.failed.get(name)
      models.push({
        name,
        state: state ?? (error ? 'failed' : 'unloaded'),
        files: modelFiles(dir),
        ...(!state && error ? { error } : {}),
      })
    }
    // A running model whose directory went away still holds its memory: it stays in the table; so
    // does each further copy that runs.
    for (const [name, p] of this.procs) {
      const state = this.stateOf(name)
      if (!state) continue
      if (p.launch.instance) models.push({ name, copy_of: p.launch.model, state, files: [] })
      else if (!onDisk.has(name)) models.push({ name, state, files: [] })
    }
    return { status: 'online', models }
  }

  /** loaded, loading, or null when its process does not run (stopping counts: its memory is held). */
  private stateOf(name: string): 'loaded' | 'loading' | null {
    const s = this.procs.get(name)?.child.state
    return s === 'ready' || s === 'stopping' ? 'loaded' : s === 'starting' ? 'loading' : null
  }

  async load(
    name: string,
    params: Record<string, unknown>,
    placement: LoadPlacement,
    signal?: AbortSignal,
  ): Promise<void> {
    const now = this.procs.get(name)?.child.state
    if (now === 'ready') return
    if (now === 'starting') throw new LoadFailed(`${name} is being loaded already`)
    const model = placement.copy_of ?? name
    const dir = scanModels(this.modelsDir).get(model)
    if (!dir) throw new LoadFailed(`${model} is not in ${this.modelsDir}`)
    const launch: Launch = {
      model,
      ...(placement.copy_of ? { instance: name } : {}),
      params,
      gpus: placement.gpus,
    }
    const p = this.procFor(launch, dir)
    this.failed.delete(name)
    this.state.writeJson(launchFile(childName(name)), launch)
    const began = this.timers.nowMs()
    try {
      await p.child.start(signal)
      await this.checkServes(model, p.child.url)
    } catch (e) {
      await this.end(p)
      const why =
        e instanceof StartTimeout
          ? `gave up loading ${name} after ${Math.round((this.timers.nowMs() - began) / 1000)} s ` +
            `(no output for ${e.silentSeconds} s, --load-timeout ${this.loadTimeoutMs / 1000}); ${e.said(LINES_PER_ERROR)}`
          : (e as Error).message
      this.failed.set(name, why)
      throw new LoadFailed(why)
    }
  }

  async unload(name: string): Promise<void> {
    const p = this.procs.get(name)
    if (p) await this.end(p)
  }

  lastLines(name?: string): string {
    const procs = name ? [this.procs.get(name)] : [...this.procs.values()]
    return procs
      .flatMap((p) => p?.child.lastLines(undefined, LINES_PER_ERROR) ?? [])
      .slice(-LINES_PER_ERROR)
      .join(' | ')
  }

  /** vLLM's max_num_seqs, SGLang's max_running_requests, when the profile sets them. */
  async slots(name: string): Promise<number | null> {
    const p = this.procs.get(name)
    const params = p && p.child.state === 'ready' ? p.launch.params : {}
    const n = params.max_num_seqs ?? params.max_running_requests
    return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : null
  }

  /** The model's (or copy's) process (one each, kept across its loads), set to run `launch`. */
  private procFor(launch: Launch, dir: string): Proc {
    const key = launch.instance ?? launch.model
    const known = this.procs.get(key)
    if (known) {
      known.launch = launch
      known.dir = dir
      return known
    }
    const name = childName(key)
    const p: Proc = {
      launch,
      dir,
      child: new SupervisedChild({
        name,
        state: this.state,
        timers: this.timers,
        silenceMs: this.loadTimeoutMs,
        ...(this.env ? { env: this.env } : {}),
        // Its end unasked is a lost model, not a restart: the model manager decides when it runs again.
        restart: 'never',
        command: (port) => this.argv(p.launch, p.dir, port),
        vars: () => ({ ...this.commandEnv, ...gpuEnv(p.launch.gpus ?? null) }),
        ready: async (url) => {
          await runtimeJson(`${url}/v1/models`, { timeoutMs: 2000 })
          return true
        },
        adoptable: (url) =>
          this.checkServes(launch.model, url).then(
            () => true,
            () => false,
          ),
      }),
    }
    p.child.onExit((reason) => {
      this.forget(name)
      const why = `${key}: ${reason}`
      this.failed.set(key, why)
      for (const l of this.exitListeners) l(why, [key])
    })
    this.procs.set(key, p)
    return p
  }

  private argv(launch: Launch, dir: string, port: number): string[] {
    const [program, ...rest] = renderLaunch(
      this.words,
      { model_path: dir, model: launch.model, port, params: launch.params },
      this.extraArgs,
    )
    return [...withInterpreter(program!), ...rest]
  }

  /** The engine must answer GET /v1/models and, when the command names the model, serve that name. */
  private async checkServes(name: string, url: string) {
    const list = await runtimeJson<{ data?: { id?: unknown }[] }>(`${url}/v1/models`, { timeoutMs: 5000 })
    if (!this.namesModel) return
    const ids = (list.data ?? []).map((m) => m.id).filter((id) => typeof id === 'string')
    if (!ids.includes(name))
      throw new Error(
        `the engine serves ${ids.length ? ids.join(', ') : 'no model'}, not ${name}: does the launch command pass {model} as its served model name?`,
      )
  }

  private async end(p: Proc) {
    await p.child.stop()
    this.forget(childName(p.launch.instance ?? p.launch.model))
  }

  private forget(name: string) {
    rmSync(join(this.state.dir, launchFile(name)), { force: true })
  }

  /**
   * The processes a killed run left (records in the state directory), settled by the supervisor's
   * adoption rule (engines/child.ts adopt()) with the launch each was recorded with.
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
      const launch = this.state.readJson<Launch>(launchFile(name))
      const instance = typeof launch?.instance === 'string' ? launch.instance : undefined
      const model =
        launch && typeof launch.model === 'string' && childName(instance ?? launch.model) === name
          ? launch.model
          : null
      const dir = model ? onDisk.get(model) : undefined
      const child =
        model && dir
          ? this.procFor(
              {
                model,
                ...(instance ? { instance } : {}),
                params: launch!.params && typeof launch!.params === 'object' ? launch!.params : {},
                gpus: Array.isArray(launch!.gpus) ? launch!.gpus : null,
              },
              dir,
            ).child
          : // Nothing this daemon would run: whatever still runs under that record is stopped.
            new SupervisedChild({
              name,
              state: this.state,
              timers: this.timers,
              restart: 'never',
              command: () => [],
              ready: async () => false,
            })
      if (!(await child.adopt())) this.forget(name)
    }
  }
}

const launchFile = (name: string) => join('engines', `${name}.launch.json`)

/** A file name for the model's records: readable, and distinct for names that read alike. */
export function childName(model: string): string {
  const hash = new Bun.CryptoHasher('sha256').update(model).digest('hex').slice(0, 8)
  return `${PREFIX}${model.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80)}-${hash}`
}
