import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { modelsDirLayout } from '../../src/daemon/download'
import type { EngineModel, EngineView, ManagedEngine } from '../../src/daemon/engines/types'
import { LoadFailed } from '../../src/daemon/engines/types'

// A managed engine held in memory (src/daemon/engines/types.ts), for tests of what sits above the
// engine (the model manager, the agent's wiring) at moments a test picks: a load goes on until the
// test lets it finish or fail, the engine "dies" when told. The real router's behaviour is tested
// against llama-server itself (test/daemon/managed*.test.ts).

export interface MemoryEngine extends ManagedEngine {
  /** Every load and unload asked, in order (`load a {params}`, `unload a`). */
  readonly calls: string[]
  /** Holds the next loads of `name` until finish(name) or fail(name, why). */
  holdLoads(name: string): void
  /** Resolves once a load of `name` is under way (held). */
  loadStarted(name: string): Promise<void>
  finish(name: string): void
  fail(name: string, why: string): void
  /** The engine ends: every model gone; listeners hear `reason`. */
  die(reason: string): void
  /** The engine says `name` is not loaded any more (its process ended) without a word. */
  drop(name: string): void
  offline: boolean
  state(name: string): EngineModel['state'] | undefined
  /**
   * The next status() reads what it lists (the models directory scanned, as the router's rescan
   * does) and answers only once released: a read begun before a change, answered after it.
   */
  holdStatus(): { started: Promise<void>; release(): void }
}

export function memoryEngine(
  names: string[],
  o: {
    appliesParams?: boolean
    /** Each model's files (default /models/<name>.gguf, which does not exist). */
    files?: Record<string, string[]>
    /** Where requests go (a stand-in runtime serving the names); default an address that never answers. */
    baseUrl?: string
    /**
     * A models directory of the daemon's: downloads land in it (layoutFor, as the router's), and
     * every `<name>.gguf` in it is listed, unloaded, besides `names`.
     */
    modelsDir?: string
    /** The engine it says it is (default llama.cpp). */
    engine?: 'llama.cpp' | 'vllm'
  } = {},
): MemoryEngine {
  const models = new Map<string, EngineModel>(
    names.map((n) => [n, { name: n, state: 'unloaded', files: o.files?.[n] ?? [`/models/${n}.gguf`] }]),
  )
  const held = new Set<string>()
  const pending = new Map<string, { go: () => void; no: (why: string) => void }>()
  const started = new Map<string, () => void>()
  const exits = new Set<(reason: string, models: string[] | null) => void>()
  const calls: string[] = []
  let statusHold: { started: () => void; released: Promise<void> } | null = null
  const onDisk = (): EngineModel[] =>
    o.modelsDir
      ? readdirSync(o.modelsDir)
          .filter((f) => f.endsWith('.gguf') && !models.has(f.slice(0, -'.gguf'.length)))
          .sort()
          .map((f) => ({
            name: f.slice(0, -'.gguf'.length),
            state: 'unloaded',
            files: [join(o.modelsDir!, f)],
          }))
      : []
  const engine: MemoryEngine = {
    engine: o.engine ?? 'llama.cpp',
    baseUrl: o.baseUrl ?? 'http://memory.invalid',
    appliesParams: o.appliesParams ?? true,
    calls,
    offline: false,
    async start() {},
    async stop() {},
    layoutFor: o.modelsDir ? (name, files) => modelsDirLayout(o.modelsDir!, name, files) : null,
    async status(): Promise<EngineView> {
      if (engine.offline) return { status: 'offline', error: 'down', models: [] }
      const view: EngineView = {
        status: 'online',
        models: [...[...models.values()].map((m) => ({ ...m })), ...onDisk()],
      }
      const hold = statusHold
      statusHold = null
      if (hold) {
        hold.started()
        await hold.released
      }
      return view
    },
    async load(name, params, placement) {
      calls.push(
        `load ${name} ${JSON.stringify(params)}${placement.gpus ? ` on ${placement.gpus.join(',')}` : ''}`,
      )
      const m = models.get(name)
      if (!m) throw new LoadFailed(`${name} is unknown`)
      m.state = 'loading'
      if (held.has(name)) {
        const outcome = new Promise<string | null>((resolve) =>
          pending.set(name, { go: () => resolve(null), no: (why) => resolve(why) }),
        )
        started.get(name)?.()
        const why = await outcome
        pending.delete(name)
        if (why !== null) {
          m.state = 'failed'
          throw new LoadFailed(why)
        }
      }
      m.state = 'loaded'
    },
    async unload(name) {
      calls.push(`unload ${name}`)
      const m = models.get(name)
      if (m) m.state = 'unloaded'
    },
    urlOf: () => engine.baseUrl,
    lastLines: (name) => (name ? `last words of ${name}` : 'last words'),
    onExit(listener) {
      exits.add(listener)
    },
    holdLoads: (name) => held.add(name),
    loadStarted: (name) =>
      pending.has(name) ? Promise.resolve() : new Promise<void>((resolve) => started.set(name, resolve)),
    finish: (name) => pending.get(name)?.go(),
    fail: (name, why) => pending.get(name)?.no(why),
    die(reason) {
      for (const m of models.values()) m.state = 'unloaded'
      for (const l of exits) l(reason, null)
    },
    drop(name) {
      const m = models.get(name)
      if (m) m.state = 'unloaded'
    },
    state: (name) => models.get(name)?.state,
    holdStatus() {
      let started = () => {}
      let release = () => {}
      const hold = {
        started: new Promise<void>((r) => {
          started = r
        }),
        released: new Promise<void>((r) => {
          release = r
        }),
      }
      statusHold = { started, released: hold.released }
      return { started: hold.started, release }
    },
  }
  return engine
}
