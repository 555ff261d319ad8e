import { log as rootLog } from '../../lib/logger'
import type { HeartbeatBody } from '../../protocol/worker'
import { realTimers, type Timers } from '../backoff'
import type { EngineModelState, EngineView, ManagedEngine } from '../engines/types'
import type { StateDir } from '../state'
import { paramsKey, planLoad, type TableModel } from './plan'

// The model manager (docs/worker.md "Managed engines"): the supervisor's table of the models a
// managed engine holds, engine-agnostic (engines/types.ts). It is the only caller of the engine's
// load() and unload().
//
// - The table: one row per model the engine can serve — where it stands (unloaded, loading,
//   loaded, unloading, failed), what it was loaded for (vram_gb, params), the jobs using it now
//   (leases) and when one last did (LRU). Where a model stands comes from the engine itself
//   (refresh()), except while this manager is loading or unloading it.
// - acquire(): a job asks for its model before its requests start. The VRAM rule (plan.ts) decides
//   whether to use it, load it (after unloading what it names), wait (a job using the room must be
//   done with its model first), or fail the job (the model can never fit, is not on disk, or will
//   not load: the engine's reason). One load or unload runs at a time. The job holds a lease until
//   its last request is answered; a leased model is never unloaded.
// - A model that goes away under a job (the engine died, its process ended) aborts the lease's
//   `lost` signal with the engine's last lines: the job stops and is reported failed (requeued).
// - It measures each load's duration and each model's requests per second while a job used it
//   (heartbeat `model_stats`), and names the models being loaded (heartbeat `loading_models`).
// - It remembers in the state directory what each loaded model was loaded for (models.json), so
//   that a daemon adopting the engine a killed run left budgets its models right.

const log = rootLog.child({ component: 'models' })

/** The job cannot run on this worker now; reported failed, so the batch is requeued. */
export class ModelUnavailable extends Error {}
/** The model went away under a job (the engine or the model's process ended). */
export class ModelLost extends Error {}

/** What a job needs of its model (the claimed job's model, vram_gb and serving-profile params). */
export interface ModelNeed {
  job_id: string
  name: string
  vram_gb: number | null
  params: Record<string, unknown>
}

/** A job's hold on a loaded model, from acquire() until its last request is answered. */
export interface ModelLease {
  readonly name: string
  /** Where the job's requests go (the job's endpoint is appended). */
  readonly url: string
  /** Aborted, with a ModelLost, when the model goes away under the job. */
  readonly lost: AbortSignal
  /** After a failed request: why the job cannot go on (the model is gone), or null. */
  check(): Promise<Error | null>
  /** The job is done with the model; `answered` requests were answered while it held it. */
  release(answered: number): void
}

export type ModelStat = NonNullable<HeartbeatBody['model_stats']>[number]

export interface ModelManagerOptions {
  engine: ManagedEngine
  state: StateDir
  /** The VRAM budget in GB now (--vram-gb, else what the GPUs report); null = unlimited. */
  budget: () => number | null
  timers?: Timers
  /** Something heartbeats report changed (a load began or ended, a model was unloaded or lost). */
  onChange?: () => void
}

type RowState = EngineModelState | 'unloading'

interface Lease {
  job_id: string
  lost: AbortController
}

interface Row {
  name: string
  state: RowState
  /** Bumped at every change this manager makes; a refresh older than it does not override it. */
  gen: number
  vram_gb: number | null
  params_key: string | null
  leases: Set<Lease>
  last_used_ms: number
  error?: string
}

interface Remembered {
  vram_gb: number | null
  params_key: string | null
}

const MODELS_FILE = 'models.json'
/** How often a waiting job looks again when nothing it waits on says so (an engine-side load). */
const WAIT_POLL_MS = 1000
/** How long a failed request waits to hear that the engine process ended. */
const EXIT_NEWS_MS = 2000

export class ModelManager {
  readonly engine: ManagedEngine
  private readonly state: StateDir
  private readonly budget: () => number | null
  private readonly timers: Timers
  private readonly onChange: () => void
  private readonly rows = new Map<string, Row>()
  private readonly measured = new Map<string, ModelStat>()
  private readonly waiters = new Set<() => void>()
  private gen = 0
  private refreshing: Promise<EngineView> | null = null
  /** The load (with its unloads) under way, and what it is. */
  private op: { done: Promise<void>; what: string } | null = null
  private saidParams = false

  constructor(o: ModelManagerOptions) {
    this.engine = o.engine
    this.state = o.state
    this.budget = o.budget
    this.timers = o.timers ?? realTimers
    this.onChange = o.onChange ?? (() => {})
    this.engine.onExit((reason, models) => this.lose(reason, models))
  }

  /**
   * The engine's view now, with the table brought up to date from it. Concurrent calls share one.
   * `fresh`: the caller changed what the engine lists (a model placed in its models directory), so
   * a read already under way, begun before the change, is waited out and not taken: the view comes
   * from a read that starts after this call.
   */
  refresh(o: { fresh?: boolean } = {}): Promise<EngineView> {
    const under = this.refreshing
    if (o.fresh && under)
      return under.then(
        () => this.refresh(),
        () => this.refresh(),
      )
    this.refreshing ??= this.readEngine().finally(() => {
      this.refreshing = null
    })
    return this.refreshing
  }

  private async readEngine(): Promise<EngineView> {
    const since = this.gen
    const view = await this.engine.status()
    if (view.status !== 'online') return view
    const remembered = this.state.readJson<Record<string, Remembered>>(MODELS_FILE) ?? {}
    const seen = new Set<string>()
    for (const m of view.models) {
      seen.add(m.name)
      let row = this.rows.get(m.name)
      if (!row) {
        row = {
          name: m.name,
          state: m.state,
          gen: 0,
          vram_gb: remembered[m.name]?.vram_gb ?? null,
          params_key: remembered[m.name]?.params_key ?? null,
          leases: new Set(),
          last_used_ms: 0,
        }
        this.rows.set(m.name, row)
      }
      // This manager's own loads and unloads, and anything it changed since this read began, stand.
      if (row.gen > since || row.state === 'unloading' || (row.state === 'loading' && this.op)) continue
      if (row.state === m.state) continue
      const was = row.state
      row.state = m.state
      row.error = m.error
      if (was === 'loaded' && row.leases.size > 0)
        this.loseRow(row, `${m.name} is no longer loaded in the engine${this.lines(m.name)}`)
      if (m.state === 'failed' || m.state === 'unloaded') this.forgetLoad(row)
      this.onChange()
    }
    for (const [name, row] of this.rows)
      if (!seen.has(name) && row.leases.size === 0 && row.state !== 'loading') this.rows.delete(name)
    return view
  }

  /**
   * Waits until `need.name` is loaded for the job (loading it, and unloading what the VRAM rule
   * names, when needed) and returns the job's lease. Throws ModelUnavailable when the job cannot
   * run here, and `signal`'s reason when it is aborted. `stage` hears what the job waits on.
   */
  async acquire(
    need: ModelNeed,
    signal: AbortSignal,
    stage: (what: string | null) => void = () => {},
  ): Promise<ModelLease> {
    const key = paramsKey(need.params)
    const jlog = log.child({ job_id: need.job_id, model: need.name })
    if (!this.engine.appliesParams && Object.keys(need.params).length > 0 && !this.saidParams) {
      this.saidParams = true
      jlog.warn('the attached engine runs with its own settings: serving-profile params are not applied', {
        params: need.params,
      })
    }
    let said = ''
    try {
      for (;;) {
        signal.throwIfAborted()
        const view = await this.refresh()
        signal.throwIfAborted()
        if (view.status !== 'online')
          throw new ModelUnavailable(`the engine is ${view.status}${view.error ? `: ${view.error}` : ''}`)
        const row = this.rows.get(need.name)
        if (!row) throw new ModelUnavailable(`${need.name} is not among the models of the engine`)
        const plan = planLoad(
          this.table(),
          { name: need.name, vram_gb: need.vram_gb, params_key: key },
          this.budget(),
          this.engine.appliesParams,
        )
        if (plan.do === 'use') return this.lease(row, need)
        if (plan.do === 'fail') throw new ModelUnavailable(plan.why)
        if (plan.do === 'wait' || this.op) {
          const why = plan.do === 'wait' ? plan.why : `${this.op!.what} first`
          if (why !== said) {
            said = why
            jlog.info(`job ${need.job_id} waits for ${need.name}: ${why}`)
            stage(`waiting for ${need.name}: ${why}`)
          }
          await this.changed(WAIT_POLL_MS, signal)
          continue
        }
        const unloading = plan.unload.filter((u) => u.name !== need.name)
        const why = unloading.length
          ? ` (unloading ${unloading.map((u) => u.name).join(', ')}: ${[...new Set(unloading.map((u) => u.why))].join('; ')})`
          : plan.unload.length
            ? ' (again, with other params)'
            : ''
        jlog.info(`loading ${need.name} for job ${need.job_id}${why}`, {
          vram_gb: need.vram_gb,
          budget_gb: this.budget(),
          ...(unloading.length ? { unloading: unloading.map((u) => u.name) } : {}),
        })
        stage(`loading ${need.name}${why}`)
        said = ''
        const done = this.apply(need, key, plan.unload).finally(() => {
          this.op = null
          this.notify()
        })
        // Nobody may be left to hear how it ended (the job was stopped meanwhile).
        done.catch(() => {})
        this.op = { done, what: `loading ${need.name}` }
        await untilAborted(done, signal)
      }
    } finally {
      stage(null)
    }
  }

  /** Models being loaded now (heartbeat `loading_models`). */
  loading(): string[] {
    return [...this.rows.values()].filter((r) => r.state === 'loading').map((r) => r.name)
  }

  /** What was measured per model (heartbeat `model_stats`). */
  stats(): ModelStat[] {
    return [...this.measured.values()]
  }

  /** The rows that take room, as the VRAM rule reads them. */
  private table(): TableModel[] {
    const out: TableModel[] = []
    for (const r of this.rows.values()) {
      if (r.state !== 'loaded' && r.state !== 'loading' && r.state !== 'unloading') continue
      out.push({
        name: r.name,
        state: r.state,
        vram_gb: r.vram_gb,
        in_use: r.leases.size,
        last_used_ms: r.last_used_ms,
        params_key: r.params_key,
      })
    }
    return out
  }

  /** Unloads what the plan names (unless a job took it meanwhile), then loads the job's model. */
  private async apply(need: ModelNeed, key: string, unload: { name: string; why: string }[]) {
    for (const u of unload) {
      const row = this.rows.get(u.name)
      if (row?.state !== 'loaded') continue
      // A job took it since the plan was made: plan again.
      if (row.leases.size > 0) return
      this.set(row, 'unloading')
      log.info(`unloading ${u.name}: ${u.why}`, { model: u.name, why: u.why })
      try {
        await this.engine.unload(u.name)
      } catch (e) {
        this.set(row, 'loaded')
        throw new ModelUnavailable(`could not unload ${u.name} to make room: ${(e as Error).message}`)
      }
      this.set(row, 'unloaded')
      this.forgetLoad(row)
    }
    const row = this.rows.get(need.name)
    if (!row) throw new ModelUnavailable(`${need.name} is not among the models of the engine`)
    row.vram_gb = need.vram_gb
    row.params_key = this.engine.appliesParams ? key : null
    this.set(row, 'loading')
    // Known before the load ends: a daemon killed meanwhile that adopts the engine budgets it.
    this.remember()
    const started = this.timers.nowMs()
    try {
      await this.engine.load(need.name, this.engine.appliesParams ? need.params : {})
    } catch (e) {
      row.error = (e as Error).message
      this.set(row, 'failed')
      this.forgetLoad(row)
      log.warn(`${need.name} failed to load`, { model: need.name, error: row.error })
      throw new ModelUnavailable(`${need.name} failed to load: ${row.error}`)
    }
    const seconds = Math.round(this.timers.nowMs() - started) / 1000
    this.measure(need.name, { load_seconds: seconds })
    row.last_used_ms = this.timers.nowMs()
    this.set(row, 'loaded')
    this.remember()
    log.info(`${need.name} loaded`, { model: need.name, load_seconds: seconds })
  }

  private lease(row: Row, need: ModelNeed): ModelLease {
    const lease: Lease = { job_id: need.job_id, lost: new AbortController() }
    const started = this.timers.nowMs()
    row.leases.add(lease)
    row.last_used_ms = started
    let released = false
    return {
      name: row.name,
      url: this.engine.urlOf(row.name),
      lost: lease.lost.signal,
      check: () => this.check(row.name, lease.lost.signal),
      release: (answered) => {
        if (released) return
        released = true
        row.leases.delete(lease)
        const now = this.timers.nowMs()
        row.last_used_ms = now
        const seconds = (now - started) / 1000
        if (answered > 0 && seconds > 0)
          this.measure(row.name, { requests_per_second: Math.round((answered / seconds) * 100) / 100 })
        this.notify()
      },
    }
  }

  /** After a failed request: is the model still there? (The engine's view, read now.) */
  private async check(name: string, lost: AbortSignal): Promise<Error | null> {
    if (lost.aborted) return lost.reason as Error
    const view = await this.refresh().catch(
      (e): EngineView => ({ status: 'offline', error: (e as Error).message, models: [] }),
    )
    if (view.status !== 'online') {
      // A process that died is heard of a moment after its connections break: its own account
      // (how it ended, its last lines) is the better reason.
      if (!lost.aborted) await this.timers.sleep(EXIT_NEWS_MS, lost)
      if (lost.aborted) return lost.reason as Error
      return new ModelLost(`the engine is not reachable (${view.error ?? view.status})${this.lines()}`)
    }
    if (lost.aborted) return lost.reason as Error
    if (this.rows.get(name)?.state !== 'loaded')
      return new ModelLost(`${name} is no longer loaded${this.lines(name)}`)
    return null
  }

  /** The engine (models null) or some of its models ended without being asked. */
  private lose(reason: string, models: string[] | null) {
    for (const row of this.rows.values()) {
      if (models && !models.includes(row.name)) continue
      if (row.state === 'unloaded' || row.state === 'failed') continue
      this.loseRow(row, reason)
      this.set(row, 'unloaded')
      this.forgetLoad(row)
    }
    this.notify()
  }

  private loseRow(row: Row, reason: string) {
    for (const lease of row.leases) lease.lost.abort(new ModelLost(reason))
  }

  private set(row: Row, state: RowState) {
    row.gen = ++this.gen
    if (row.state === state) return
    row.state = state
    this.onChange()
  }

  /** What a model was loaded for means nothing once it is not loaded. */
  private forgetLoad(row: Row) {
    row.vram_gb = null
    row.params_key = null
    this.remember()
  }

  private remember() {
    const out: Record<string, Remembered> = {}
    for (const r of this.rows.values())
      if (r.state === 'loaded' || r.state === 'loading')
        out[r.name] = { vram_gb: r.vram_gb, params_key: r.params_key }
    this.state.writeJson(MODELS_FILE, out)
  }

  private measure(name: string, m: Omit<ModelStat, 'name'>) {
    this.measured.set(name, { ...this.measured.get(name), name, ...m })
    this.onChange()
  }

  private lines(name?: string): string {
    const text = this.engine.lastLines(name)
    return text ? `; the engine's last lines: ${text}` : ''
  }

  private notify() {
    for (const wake of [...this.waiters]) wake()
  }

  /** Resolves at the next change of the table, after `ms`, or when `signal` aborts. */
  private async changed(ms: number, signal: AbortSignal) {
    const ac = new AbortController()
    const wake = () => ac.abort()
    this.waiters.add(wake)
    try {
      await this.timers.sleep(ms, AbortSignal.any([ac.signal, signal]))
    } finally {
      this.waiters.delete(wake)
    }
  }
}

/** `p`, or `signal`'s reason as soon as it aborts (what `p` does goes on). */
async function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) throw signal.reason
  let onAbort = () => {}
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
  })
  try {
    return await Promise.race([p, aborted])
  } finally {
    signal.removeEventListener('abort', onAbort)
  }
}
