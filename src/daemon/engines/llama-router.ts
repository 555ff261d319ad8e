import {
  accessSync,
  constants,
  existsSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { basename, dirname, isAbsolute, join, resolve } from 'node:path'
import type { DownloadFile } from '../../domain/downloads'
import { flagName } from '../../domain/serving-params'
import { log as rootLog } from '../../lib/logger'
import { realTimers, type Timers } from '../backoff'
import { type ModelLayout, modelsDirLayout } from '../download'
import { gpuEnv } from '../gpu'
import { RuntimeHttpError, runtimeJson, statusOf } from '../runtimes/types'
import type { StateDir } from '../state'
import { argvOf, endProcess, groupMembers, SupervisedChild } from './child'
import { DEFAULT_LOAD_TIMEOUT_MS } from './launched'
import {
  type EngineModel,
  type EngineModelState,
  type EngineView,
  LoadFailed,
  type LoadPlacement,
  type ManagedEngine,
} from './types'

// llama.cpp's router (docs/worker.md "Managed engines"): one `llama-server` without a model, which
// serves every GGUF of a models directory and runs one child process per loaded model.
//
// - Managed (`--models-dir DIR`): the daemon starts it as its supervised child (engines/child.ts) on
//   a free loopback port: `llama-server --models-dir DIR --models-preset <state>/engines/
//   llama-router.ini --no-models-autoload --models-max 0 --host 127.0.0.1 --port P [--engine-args]`.
//   Nothing loads unless the daemon asks, and the router itself never evicts (`--models-max 0`):
//   the model manager decides. Attached (`--runtime-url URL`): a router someone else runs.
// - GET /models lists the models: `id` is a GGUF's file stem (`alpha.gguf` → `alpha`), or the name
//   of a subdirectory holding a model's files (shards, a projector); `status.value` is unloaded,
//   loading or loaded, `status.failed` and `exit_code` say a load failed; `status.args` are the
//   child's arguments (`--model PATH`, `--mmproj PATH`, `--port N`). The router does not rescan the
//   directory by itself: `GET /models?reload=1` does, and re-reads the preset file.
// - POST /models/load {model} answers at once; loading goes on in the background until the model
//   is `loaded`, or `unloaded` with `failed: true` (a corrupt GGUF). POST /models/unload {model}.
// - Params (serving profiles, docs/api.md §4) are the model's preset section, which the daemon owns:
//   `[alpha]` / `ctx-size = 1024` / `embedding = true` (llama-server's long flag names). A reload
//   that changes the section of a RUNNING model stops that model, so a section is only ever written
//   for a model that is not loaded (the manager unloads one loaded with other params first). A key
//   the router does not know makes the reload answer 500 (`option 'x' not recognized in preset
//   'alpha'`): the section is taken back, and the load fails with that reason. Relative paths in
//   `mmproj` and `chat_template_file` are the model's directory's.
// - Its children's output comes through its own, each line prefixed `[<port>] `: a model's last
//   lines are those of its port (`status.args`), quoted when its load fails.
// - GPUs (docs/worker.md "GPUs"): the router runs with the daemon's GPUs as CUDA_VISIBLE_DEVICES
//   (nvidia-smi's order), and each model's section names the GPUs the model manager placed it on as
//   llama.cpp devices, numbered in that list: `device = CUDA0,CUDA1`. The model's process loads on
//   those alone, split over them when there are several.
// - A load that stays silent for the load timeout (no new line of the model's output; attached: no
//   news since the load was asked) is given up: the router is asked to unload it (it kills a model
//   still loading), the model's process is confirmed gone, and the load fails with
//   `gave up loading <name> after N s` and its last lines.

const log = rootLog.child({ component: 'engine' })

interface RouterModel {
  id?: unknown
  status?: { value?: unknown; args?: unknown; failed?: unknown; exit_code?: unknown }
}

const PATH_PARAMS = new Set(['mmproj', 'chat_template_file'])
/**
 * A load or unload is watched (GET /models, a millisecond on loopback) every 5 ms for the first
 * 20 reads, then each wait a tenth longer, at most every 200 ms: a small model's load is seen within
 * a few ms of the router's, a large one's costs few reads (a 10 s load, about 70).
 */
const POLL_FIRST_MS = 5
const POLL_MAX_MS = 200
const pollWait = (n: number) => Math.min(POLL_MAX_MS, Math.round(POLL_FIRST_MS * 1.1 ** Math.max(0, n - 20)))
/** How long a load may take to show as `loading` at all. */
const LOAD_START_MS = 10_000
const ATTACHED_RELOAD_MS = 30_000
/** How long an unload may take before it counts as failed. */
const UNLOAD_MS = 60_000
const LINES_PER_ERROR = 6

export interface LlamaRouterOptions {
  state: StateDir
  /** The daemon's GPUs (nvidia-smi indices; --gpus): the router's CUDA_VISIBLE_DEVICES; null: none known. */
  gpus?: () => number[] | null
  /** Longest a model's load may stay silent (--load-timeout; default 15 min). */
  loadTimeoutMs?: number
  /** Managed: the models directory, the llama-server binary and more router arguments. */
  managed?: { modelsDir: string; binary: string; extraArgs: string[]; env?: Record<string, string> }
  /** Attached: the router's base URL. */
  url?: string
  timers?: Timers
}

export class LlamaRouter implements ManagedEngine {
  readonly engine = 'llama.cpp' as const
  readonly appliesParams: boolean
  private readonly child: SupervisedChild | null
  private readonly attachedUrl: string
  /** The models directory of a router the daemon runs; null when attached. */
  private readonly modelsDir: string | null = null
  private readonly presetPath: string
  private readonly timers: Timers
  private readonly gpus: () => number[] | null
  private readonly loadTimeoutMs: number
  private readonly exitListeners = new Set<(reason: string, models: string[] | null) => void>()
  /** Each model's child port (status.args), for its lines of the router's output. */
  private readonly ports = new Map<string, string>()
  /** Each model's directory (where its relative path params point). */
  private readonly dirs = new Map<string, string>()
  private readonly unreadable = new Set<string>()
  /** What the models directory held at the last rescan (managed). */
  private scanned = ''
  private lastReloadMs = 0
  /** The preset file's writes, one at a time. */
  private presetWrites: Promise<void> = Promise.resolve()
  private readonly binary: string | null = null
  /**
   * Managed: downloads land in the models directory, a single GGUF as `<name>.gguf` (the router
   * names a file by its stem), several files in `<name>/` by file name (the router reads a model's
   * directory one level deep and names the model after it). The next status() sees other names
   * there and rescans.
   */
  readonly layoutFor: ((name: string, files: readonly DownloadFile[]) => ModelLayout) | null

  constructor(o: LlamaRouterOptions) {
    this.timers = o.timers ?? realTimers
    this.gpus = o.gpus ?? (() => null)
    this.loadTimeoutMs = o.loadTimeoutMs ?? DEFAULT_LOAD_TIMEOUT_MS
    this.presetPath = join(o.state.dir, 'engines', 'llama-router.ini')
    this.appliesParams = !!o.managed
    this.attachedUrl = (o.url ?? '').replace(/\/+$/, '')
    if (o.managed) {
      const { extraArgs } = o.managed
      // The binary on PATH, or as given; resolved so that the record names the file that runs.
      const binary = Bun.which(o.managed.binary) ?? o.managed.binary
      this.binary = binary
      const modelsDir = resolve(o.managed.modelsDir)
      this.modelsDir = modelsDir
      this.layoutFor = (name, files) => modelsDirLayout(modelsDir, name, files, { flat: true })
      this.child = new SupervisedChild({
        name: 'llama-router',
        state: o.state,
        timers: this.timers,
        restart: 'always',
        ...(o.managed.env ? { env: o.managed.env } : {}),
        vars: () => gpuEnv(this.gpus()),
        command: (port) => [
          binary,
          '--models-dir',
          modelsDir,
          '--models-preset',
          this.presetPath,
          '--no-models-autoload',
          '--models-max',
          '0',
          '--host',
          '127.0.0.1',
          '--port',
          String(port),
          ...extraArgs,
        ],
        // A start (first, or after a crash) loads nothing: it begins from an empty preset, and
        // each load writes its model's section. A stale section could keep the router from starting.
        beforeSpawn: () => writeFileSync(this.presetPath, '', { mode: 0o600 }),
        ready: async (url) => {
          await runtimeJson(`${url}/models`, { timeoutMs: 2000 })
          return true
        },
      })
      this.child.onExit((reason) => {
        for (const l of this.exitListeners) l(reason, null)
      })
    } else {
      this.child = null
      this.layoutFor = null
    }
  }

  get baseUrl(): string {
    return this.child ? this.child.url : this.attachedUrl
  }

  async start(): Promise<void> {
    if (!this.child) return
    const dir = this.modelsDir!
    if (!existsSync(dir) || !statSync(dir).isDirectory())
      throw new Error(`--models-dir ${dir}: no such directory`)
    if (!existsSync(this.binary!))
      throw new Error(
        `${this.binary}: no such program (install llama.cpp, or name its llama-server with --llama-server PATH)`,
      )
    // An adopted router keeps the preset file it runs its models with.
    await this.child.start()
  }

  async stop(): Promise<void> {
    await this.child?.stop()
  }

  onExit(listener: (reason: string, models: string[] | null) => void) {
    this.exitListeners.add(listener)
  }

  urlOf(): string {
    return this.baseUrl
  }

  async status(): Promise<EngineView> {
    if (this.child && !this.child.running)
      return { status: 'offline', error: 'the engine is restarting', models: [] }
    // Its output grows with every request it serves.
    this.child?.trimLog()
    let list: RouterModel[]
    try {
      list = await this.listFresh()
    } catch (e) {
      return { status: statusOf(e), error: (e as Error).message, models: [] }
    }
    const models: EngineModel[] = []
    for (const m of list) {
      if (typeof m.id !== 'string' || !m.id) continue
      const args = this.learn(m)
      const failed = m.status?.failed === true
      const state: EngineModelState =
        m.status?.value === 'loaded'
          ? 'loaded'
          : m.status?.value === 'loading'
            ? 'loading'
            : failed
              ? 'failed'
              : 'unloaded'
      models.push({
        name: m.id,
        state,
        files: this.filesOf(m.id, args),
        ...(state === 'failed' ? { error: this.failure(m.id, m.status?.exit_code) } : {}),
      })
    }
    return { status: 'online', models }
  }

  async load(
    name: string,
    params: Record<string, unknown>,
    placement: LoadPlacement,
    signal?: AbortSignal,
  ): Promise<void> {
    if (this.appliesParams) await this.writeSection(name, { ...params, ...this.devices(placement) })
    try {
      await runtimeJson(`${this.baseUrl}/models/load`, { body: { model: name } })
    } catch (e) {
      throw new LoadFailed(`the engine refused to load ${name}: ${engineMessage(e)}`)
    }
    const askedAt = this.timers.nowMs()
    // Progress is the model's output growing (the router's log, its port's lines).
    let heardAt = askedAt
    let size = this.child?.outputSize() ?? 0
    let last = ''
    for (let seen = false, n = 0; ; n++) {
      if (signal?.aborted) throw signal.reason
      let m: RouterModel | undefined
      try {
        m = (await this.list(false)).find((x) => x.id === name)
      } catch (e) {
        throw new LoadFailed(`the engine stopped answering while ${name} loaded: ${(e as Error).message}`)
      }
      if (m) this.learn(m)
      const value = m?.status?.value
      if (value === 'loaded') return
      const now = this.timers.nowMs()
      if (value === 'loading') {
        seen = true
        const grown = this.child?.outputSize() ?? 0
        if (grown !== size) {
          size = grown
          const line = this.lastLines(name)
          if (line !== last) {
            last = line
            heardAt = now
          }
        }
        if (now - heardAt > this.loadTimeoutMs) await this.giveUp(name, askedAt, heardAt)
      } else if (m?.status?.failed === true || seen || !m)
        throw new LoadFailed(m ? this.failure(name, m.status?.exit_code) : `${name} is gone from the engine`)
      else if (now - askedAt > LOAD_START_MS)
        throw new LoadFailed(`the engine accepted the load of ${name} but did not start it`)
      await this.timers.sleep(pollWait(n), signal)
    }
  }

  /** The section's `device` list for the GPUs the model was placed on, numbered as the router sees them. */
  private devices(placement: LoadPlacement): Record<string, string> {
    const visible = this.gpus()
    if (!placement.gpus || !visible) return {}
    return { device: placement.gpus.map((g) => `CUDA${visible.indexOf(g)}`).join(',') }
  }

  /**
   * A load silent past the load timeout: the router unloads it (it kills a model still loading),
   * its process is confirmed gone, and the load fails saying so with the model's last lines.
   */
  private async giveUp(name: string, askedAt: number, heardAt: number): Promise<never> {
    const now = this.timers.nowMs()
    const lines = this.lastLines(name)
    const port = this.ports.get(name)
    await runtimeJson(`${this.baseUrl}/models/unload`, { body: { model: name } }).catch(() => {})
    for (let n = 0; this.timers.nowMs() - now < UNLOAD_MS; n++) {
      const m = (await this.list(false).catch(() => [] as RouterModel[])).find((x) => x.id === name)
      if (m?.status?.value !== 'loading' && m?.status?.value !== 'loaded') break
      await this.timers.sleep(pollWait(n))
    }
    // The router says it is gone; the process table must say so too before its memory counts as free.
    const router = this.child?.pid
    if (router && port)
      for (const pid of groupMembers(router))
        if (pid !== router && (argvOf(pid) ?? []).join(' ').includes(`--port ${port}`))
          await endProcess(pid, this.timers)
    throw new LoadFailed(
      `gave up loading ${name} after ${Math.round((now - askedAt) / 1000)} s ` +
        `(no output for ${Math.round((now - heardAt) / 1000)} s, --load-timeout ${this.loadTimeoutMs / 1000})` +
        (lines ? `; the engine's last lines: ${lines}` : ''),
    )
  }

  async unload(name: string): Promise<void> {
    try {
      await runtimeJson(`${this.baseUrl}/models/unload`, { body: { model: name } })
    } catch (e) {
      // 400 "model is not running": already unloaded.
      if (!(e instanceof RuntimeHttpError && e.status === 400)) throw e
    }
    const askedAt = this.timers.nowMs()
    for (let n = 0; ; n++) {
      const m = (await this.list(false)).find((x) => x.id === name)
      if (m?.status?.value !== 'loaded' && m?.status?.value !== 'loading') return
      if (this.timers.nowMs() - askedAt > UNLOAD_MS)
        throw new Error(`${name} was still loaded a minute after its unload`)
      await this.timers.sleep(pollWait(n))
    }
  }

  lastLines(name?: string): string {
    if (!this.child) return ''
    const port = name ? this.ports.get(name) : undefined
    const prefix = port ? `[${port}] ` : null
    const named = name ? new RegExp(`name=${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\s|$)`) : null
    const keep = named
      ? (l: string) => (prefix !== null && l.startsWith(prefix)) || named.test(l)
      : () => true
    const lines = this.child.lastLines(keep, 40).map(compact)
    // A failure is best told by its error lines.
    const errors = lines.filter((l) => /^E |\berror\b/i.test(l))
    return (errors.length ? errors : lines).slice(-LINES_PER_ERROR).join(' | ')
  }

  async slots(name: string): Promise<number | null> {
    const props = await runtimeJson<{ total_slots?: unknown }>(
      `${this.baseUrl}/props?model=${encodeURIComponent(name)}`,
    )
    const n = props.total_slots
    return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : null
  }

  /** The model's child arguments, with its port and directory noted. */
  private learn(m: RouterModel): string[] {
    const args = Array.isArray(m.status?.args)
      ? m.status.args.filter((a): a is string => typeof a === 'string')
      : []
    if (typeof m.id !== 'string') return args
    const port = argAfter(args, '--port')
    if (port && port !== '0') this.ports.set(m.id, port)
    const weights = argAfter(args, '--model')
    if (weights) this.dirs.set(m.id, dirname(weights))
    return args
  }

  /** Makes the router read the models directory and the preset file again. */
  private async rescan() {
    await this.list(true)
  }

  private async list(reload: boolean): Promise<RouterModel[]> {
    const res = await runtimeJson<{ data?: RouterModel[] }>(
      `${this.baseUrl}/models${reload ? '?reload=1' : ''}`,
    )
    return Array.isArray(res.data) ? res.data : []
  }

  /**
   * The list, rescanned first when the directory may hold something new. Managed: when the models
   * directory holds other names than at the last rescan (a file copied in, or downloaded).
   * Attached: the directory is not ours to read; the router's owner rescans, and so does this
   * daemon, at most every ATTACHED_RELOAD_MS — and a rescan the router refuses (its owner's preset)
   * is left to its owner: the plain list stands.
   */
  private async listFresh(): Promise<RouterModel[]> {
    if (!this.modelsDir) {
      if (this.timers.nowMs() - this.lastReloadMs < ATTACHED_RELOAD_MS) return this.list(false)
      this.lastReloadMs = this.timers.nowMs()
      return this.list(true).catch((e) => {
        if (e instanceof RuntimeHttpError) return this.list(false)
        throw e
      })
    }
    const now = scanModelsDir(this.modelsDir)
    if (now === this.scanned) return this.list(false)
    const list = await this.list(true)
    this.scanned = now
    return list
  }

  /**
   * The model's files, weights first: its `--model` file; for a model that is a directory of its
   * own, every GGUF in it; its `--mmproj`. Empty when they are not readable here (said once).
   */
  private filesOf(name: string, args: string[]): string[] {
    const weights = argAfter(args, '--model')
    if (!weights || !isAbsolute(weights)) return []
    const files = [weights]
    const dir = dirname(weights)
    const ownDir = this.modelsDir ? resolve(dir) !== this.modelsDir : basename(dir) === name
    if (ownDir) {
      try {
        for (const f of readdirSync(dir).sort())
          if (f.endsWith('.gguf') && join(dir, f) !== weights) files.push(join(dir, f))
      } catch {}
    }
    const mmproj = argAfter(args, '--mmproj')
    if (mmproj && isAbsolute(mmproj) && !files.includes(mmproj)) files.push(mmproj)
    for (const f of files) {
      try {
        accessSync(f, constants.R_OK)
      } catch (e) {
        if (!this.unreadable.has(f)) {
          this.unreadable.add(f)
          log.warn('a model file the engine names is not readable here; matching the model by name only', {
            model: name,
            path: f,
            error: (e as NodeJS.ErrnoException).code ?? (e as Error).message,
          })
        }
        return []
      }
    }
    return files
  }

  private failure(name: string, exitCode: unknown): string {
    const lines = this.lastLines(name)
    const code = typeof exitCode === 'number' ? `exit code ${exitCode}` : 'it failed'
    return `${code}${lines ? `: ${lines}` : ''}`
  }

  /**
   * The model's preset section, with the job's params; the router reads it again now. A section the
   * router refuses is taken back (the load fails with the router's reason).
   */
  private writeSection(name: string, params: Record<string, unknown>): Promise<void> {
    // Loads on other GPUs run at once: their sections are written one after the other.
    const next = this.presetWrites.then(() => this.writeSectionNow(name, params))
    this.presetWrites = next.catch(() => {})
    return next
  }

  private async writeSectionNow(name: string, params: Record<string, unknown>) {
    if (/[\]\r\n]/.test(name))
      throw new LoadFailed(`a model named ${JSON.stringify(name)} cannot have a preset section`)
    const dir = this.dirs.get(name) ?? this.modelsDir!
    const lines: string[] = []
    for (const [key, raw] of Object.entries(params)) {
      if (raw === null || raw === undefined) continue
      let value = String(raw)
      if (/[\r\n]/.test(value)) throw new LoadFailed(`param "${key}" holds a line break`)
      if (PATH_PARAMS.has(key) && !isAbsolute(value)) value = resolve(dir, value)
      lines.push(`${flagName(key)} = ${value}`)
    }
    const before = existsSync(this.presetPath) ? readFileSync(this.presetPath, 'utf8') : ''
    const sections = parseSections(before)
    if (lines.length) sections.set(name, lines)
    else sections.delete(name)
    const after = formatSections(sections)
    if (after === before) return
    writeFileSync(this.presetPath, after, { mode: 0o600 })
    try {
      await this.rescan()
    } catch (e) {
      writeFileSync(this.presetPath, before, { mode: 0o600 })
      await this.rescan().catch(() => {})
      throw new LoadFailed(`the engine refused the params of ${name}: ${engineMessage(e)}`)
    }
  }
}

/** The router's own words from its error envelope, else the whole message. */
function engineMessage(e: unknown): string {
  const text = (e as Error).message ?? String(e)
  const json = text.indexOf('{')
  try {
    const message = JSON.parse(text.slice(json)).error?.message
    if (json >= 0 && typeof message === 'string') return message
  } catch {}
  return text
}

function argAfter(args: string[], flag: string): string | null {
  const i = args.indexOf(flag)
  return i >= 0 && i + 1 < args.length ? args[i + 1]! : null
}

/** `[41234] 0.00.006.157 E llama_model_load: …` → `E llama_model_load: …` */
function compact(line: string): string {
  return line.replace(/^\[\d+\] /, '').replace(/^\d+\.\d+\.\d+\.\d+ /, '')
}

/** The names a router would list in `dir`: top-level GGUF stems and subdirectories holding GGUFs. */
export function scanModelsDir(dir: string): string {
  const names: string[] = []
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isFile() && e.name.endsWith('.gguf')) names.push(e.name.slice(0, -'.gguf'.length))
      else if (e.isDirectory()) {
        try {
          if (readdirSync(join(dir, e.name)).some((f) => f.endsWith('.gguf'))) names.push(`${e.name}/`)
        } catch {}
      }
    }
  } catch {}
  return names.sort().join('\n')
}

/** The preset file as sections of `key = value` lines (the daemon writes it; nobody else). */
function parseSections(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>()
  let current: string[] | null = null
  for (const line of text.split('\n')) {
    const head = /^\[(.*)\]\s*$/.exec(line)
    if (head) {
      current = []
      out.set(head[1]!, current)
    } else if (current && line.trim()) current.push(line.trim())
  }
  return out
}

function formatSections(sections: Map<string, string[]>): string {
  return [...sections]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, lines]) => `[${name}]\n${lines.join('\n')}\n`)
    .join('\n')
}
