import { log as rootLog } from '../../lib/logger'
import type { HeartbeatBody } from '../../protocol/worker'
import { realTimers, type Timers } from '../backoff'
import { copyName, type EngineModelState, type EngineView, type ManagedEngine } from '../engines/types'
import type { StateDir } from '../state'
import {
  type LoadPlan,
  paramsKey,
  planCopy,
  planLoad,
  planSelf,
  type Room,
  type TableModel,
  wants,
} from './plan'

// The model manager (docs/worker.md "Managed engines"): the supervisor's table of the models a
// managed engine holds, engine-agnostic (engines/types.ts). It is the only caller of the engine's
// load() and unload().
//
// - The table: one row per model the engine can serve — where it stands (unloaded, loading,
//   loaded, unloading, failed), what it was loaded for (vram_gb, params), the GPUs it sits on and
//   its share of each, the jobs using it now (leases) and when one last did (LRU). Where a model
//   stands comes from the engine itself (refresh()), except while this manager is loading or
//   unloading it.
// - acquire(): a job asks for its model before its requests start. The placement rule (plan.ts),
//   over the table and the GPU ledger the daemon reads now (room()), decides whether to use it, load
//   it on which GPUs (after unloading what it names), wait (a job using the room must be done with
//   its model first), or fail the job (the model can never fit, is not on disk, or will not load:
//   the engine's reason). Loads run one at a time, except on disjoint GPU sets: two models loading
//   on two GPUs load at once (what each takes, and what it unloads, is reserved in the table as its
//   plan is made, so the next plan sees it). The job holds a lease until its last request is
//   answered; a leased model is never unloaded.
// - Copies (docs/worker.md "GPUs"): with an engine that runs them (a launched engine), a job
//   claimed for a spare GPU whose model is in use on every copy gets one more copy of it on other
//   GPUs (plan.ts rule 2a); each copy is a row of its own (named copyName(model, n)), and a job
//   uses the copy of its model fewest jobs use. What heartbeats say is per model.
// - A model that failed to load here is not tried again here for a while (FAILED_LOAD_MS, doubling
//   at each further failure up to FAILED_LOAD_MAX_MS; a load that works starts the count over): a
//   job for it meanwhile fails at once with the load's reason, so its batch goes to another worker
//   or uses up its attempts with that reason, instead of this worker loading it again and again.
// - A model that goes away under a job (the engine died, its process ended) aborts the lease's
//   `lost` signal with the engine's last lines: the job stops and is reported failed (requeued).
// - It measures each load's duration and each model's requests per second while a job used it
//   (heartbeat `model_stats`), and names the models being loaded (heartbeat `loading_models`).
// - It remembers in the state directory what each loaded model was loaded for and where
//   (models.json), so that a daemon adopting the engine a killed run left places its models right.

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
  /** Claimed for a spare GPU (the poll's spare_gpu): one more copy of its model may be made for it. */
  spare?: boolean
}

/** A job's hold on a loaded model, from acquire() until its last request is answered. */
export interface ModelLease {
  readonly name: string
  /** The copy it holds: the model's own name, or a further copy's (engines/types.ts copyName). */
  readonly instance: string
  /** Where the job's requests go (the job's endpoint is appended). */
  readonly url: string
  /** Aborted, with a ModelLost, when the model goes away under the job. */
  readonly lost: AbortSignal
  /** Which load of the model this is (a new one after each load): its slots may differ. */
  readonly load: number
  /** After a failed request: why the job cannot go on (the model is gone), or null. */
  check(): Promise<Error | null>
  /** The job is done with the model; `answered` requests were answered while it held it. */
  release(answered: number): void
}

export type ModelStat = NonNullable<HeartbeatBody['model_stats']>[number]

export interface ModelManagerOptions {
  engine: ManagedEngine
  state: StateDir
  /**
   * The room models are placed in, read now (docs/worker.md "GPUs"): the daemon's GPUs with what
   * the driver reports free, or one budget (--vram-gb; null = no limit). `fresh`: something was
   * loaded or unloaded since the last read (a cached driver figure would be stale).
   */
  room: (fresh: boolean) => Promise<Room>
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
  /** The model's name, or a further copy's. */
  name: string
  /** The model it serves (its own name for the model's row). */
  model: string
  state: RowState
  /** Bumped at every change this manager makes; a refresh older than it does not override it. */
  gen: number
  vram_gb: number | null
  params_key: string | null
  leases: Set<Lease>
  last_used_ms: number
  /** The GPUs it sits on and its share of each (null: none known). */
  gpus: number[] | null
  claim_gb: number | null
  /** Bumped at each load (ModelLease.load). */
  loads: number
  error?: string
}

interface Remembered {
  vram_gb: number | null
  params_key: string | null
  gpus?: number[] | null
  claim_gb?: number | null
}

/** A load under way (with the unloads it makes room with). */
interface Op {
  what: string
  /** Its GPU set; null: placed in no GPU set (one budget), which shares everything. */
  gpus: number[] | null
  /** The models it loads and unloads. */
  names: Set<string>
  done: Promise<void>
}

const MODELS_FILE = 'models.json'
/** How often a waiting job looks again when nothing it waits on says so (an engine-side load). */
const WAIT_POLL_MS = 1000
/** How long a failed request waits to hear that the engine process ended. */
const EXIT_NEWS_MS = 2000
/** How long a model that failed to load is not tried again here, after its first failure in a row. */
export const FAILED_LOAD_MS = 60_000
export const FAILED_LOAD_MAX_MS = 60 * 60_000

export class ModelManager {
  readonly engine: ManagedEngine
  private readonly state: StateDir
  private readonly room: (fresh: boolean) => Promise<Room>
  private readonly timers: Timers
  private readonly onChange: () => void
  private readonly rows = new Map<string, Row>()
  private readonly measured = new Map<string, ModelStat>()
  private readonly waiters = new Set<() => void>()
  private gen = 0
  private refreshing: Promise<EngineView> | null = null
  /** The loads (with their unloads) under way: what each is, its GPUs and the models it touches. */
  private readonly ops = new Set<Op>()
  private saidParams = false
  /** Jobs in acquire() not placed yet (being planned, or waiting for room); not those whose load runs. */
  private placing = 0
  /** Loaded, unloaded or lost since the room was last read. */
  private roomStale = true
  /** The last room read (which GPUs have no model in use: idleGpu()). */
  private lastRoom: Room | null = null
  /** Models that failed to load here: how many times in a row, when last, and why. */
  private readonly failedLoads = new Map<string, { count: number; atMs: number; why: string }>()

  constructor(o: ModelManagerOptions) {
    this.engine = o.engine
    this.state = o.state
    this.room = o.room
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
        const r = remembered[m.name]
        row = {
          name: m.name,
          model: m.copy_of ?? m.name,
          state: m.state,
          gen: 0,
          vram_gb: r?.vram_gb ?? null,
          params_key: r?.params_key ?? null,
          gpus: Array.isArray(r?.gpus) ? r.gpus : null,
          claim_gb: typeof r?.claim_gb === 'number' ? r.claim_gb : null,
          leases: new Set(),
          last_used_ms: 0,
          loads: 0,
        }
        this.rows.set(m.name, row)
      }
      // This manager's own loads and unloads, and anything it changed since this read began, stand.
      if (row.gen > since || row.state === 'unloading' || (row.state === 'loading' && this.touched(row.name)))
        continue
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
    this.placing++
    try {
      for (;;) {
        signal.throwIfAborted()
        const view = await this.refresh()
        signal.throwIfAborted()
        if (view.status !== 'online')
          throw new ModelUnavailable(`the engine is ${view.status}${view.error ? `: ${view.error}` : ''}`)
        if (!this.rows.has(need.name))
          throw new ModelUnavailable(`${need.name} is not among the models of the engine`)
        const want = {
          name: need.name,
          vram_gb: need.vram_gb,
          params_key: key,
          ...wants(this.engine.engine, need.params, this.engine.appliesParams, need.vram_gb),
        }
        // Rules that need no room first: a model loaded as wanted is used without reading the GPUs —
        // unless the job came for a spare GPU and a copy of it is worth making there (rule 2a).
        const self = planSelf(this.table(), want, this.engine.appliesParams)
        const copy =
          need.spare && this.engine.copies && (self?.do === 'use' || self?.do === 'wait')
            ? this.nextCopy(need.name)
            : null
        const copyPlan = copy ? planCopy(this.table(), want, await this.readRoom(), copy) : null
        const target = copyPlan ? copy! : need.name
        const plan =
          copyPlan ?? self ?? planLoad(this.table(), want, await this.readRoom(), this.engine.appliesParams)
        signal.throwIfAborted()
        if (plan.do === 'use') return this.lease(this.rows.get(plan.instance)!, need)
        if (plan.do === 'load') this.checkCooldown(need.name)
        if (plan.do === 'fail') throw new ModelUnavailable(plan.why)
        const before = plan.do === 'load' ? this.conflict(plan, target) : null
        if (plan.do === 'wait' || before) {
          const why = plan.do === 'wait' ? plan.why : `${before!.what} first`
          if (why !== said) {
            said = why
            jlog.info(`job ${need.job_id} waits for ${need.name}: ${why}`)
            stage(`waiting for ${need.name}: ${why}`)
          }
          await this.changed(WAIT_POLL_MS, signal)
          continue
        }
        const unloading = plan.unload.filter((u) => u.name !== target)
        const why = unloading.length
          ? ` (unloading ${unloading.map((u) => u.name).join(', ')}: ${[...new Set(unloading.map((u) => u.why))].join('; ')})`
          : plan.unload.length
            ? ' (again, with other params)'
            : ''
        const where = plan.gpus ? ` ${plan.why}` : ''
        const what = target === need.name ? need.name : `${target}, another copy of ${need.name},`
        jlog.info(`loading ${what} for job ${need.job_id}${where}${why}`, {
          vram_gb: need.vram_gb,
          ...(plan.gpus ? { gpus: plan.gpus, gb_per_gpu: plan.claim_gb } : { budget: plan.why }),
          ...(Object.keys(plan.extra_params).length ? { derived_params: plan.extra_params } : {}),
          ...(unloading.length ? { unloading: unloading.map((u) => u.name) } : {}),
        })
        stage(`loading ${target}${plan.gpus ? ` on GPU ${plan.gpus.join(', ')}` : ''}${why}`)
        said = ''
        const op: Op = {
          what: `loading ${target}`,
          gpus: plan.gpus,
          names: new Set([target, ...plan.unload.map((u) => u.name)]),
          done: Promise.resolve(),
        }
        const reserved = this.reserve(need, target, key, plan)
        // A job took a model the plan would unload: plan again.
        if (!reserved) continue
        this.ops.add(op)
        op.done = this.apply(need, target, plan, reserved).finally(() => {
          this.ops.delete(op)
          this.notify()
        })
        // Nobody may be left to hear how it ended (the job was stopped meanwhile).
        op.done.catch(() => {})
        // Its GPUs are reserved (the row is loading there): while it loads, the job is placed, and
        // another GPU that holds nothing in use is idle for the next job (docs/worker.md "Jobs").
        this.placing--
        this.onChange()
        try {
          await untilAborted(op.done, signal)
        } finally {
          this.placing++
        }
      }
    } finally {
      this.placing--
      stage(null)
      // The job holds its model now, or left: whether a GPU is idle may have changed.
      this.onChange()
    }
  }

  /** The name for one more copy of `model`: the first copyName() no row holds. */
  private nextCopy(model: string): string {
    for (let n = 2; ; n++) {
      const row = this.rows.get(copyName(model, n))
      if (!row || row.state === 'unloaded' || row.state === 'failed') return copyName(model, n)
    }
  }

  /** The GPUs each loaded model sits on, its copies' together (heartbeat `model_gpus`, docs/api.md §7). */
  placements(): { name: string; gpus: number[] }[] {
    const out = new Map<string, Set<number>>()
    for (const r of this.rows.values()) {
      if ((r.state !== 'loaded' && r.state !== 'loading') || !r.gpus) continue
      const set = out.get(r.model) ?? new Set<number>()
      for (const g of r.gpus) set.add(g)
      out.set(r.model, set)
    }
    return [...out].map(([name, gpus]) => ({ name, gpus: [...gpus].sort((a, b) => a - b) }))
  }

  /** Whether a job is being placed (planned, or waiting for room): where it goes is not known yet. */
  get placingJobs(): boolean {
    return this.placing > 0
  }

  /**
   * Whether a GPU of the daemon holds no model a job is using or that is being loaded: a job for
   * another model could run there now (the agent claims one more). False without GPUs.
   */
  idleGpu(): boolean {
    const room = this.lastRoom
    // A job still being placed (or waiting for room) may take the GPU that looks idle.
    if (!room || !('gpus' in room) || this.placing > 0) return false
    const busy = new Set<number>()
    for (const r of this.rows.values())
      if (r.leases.size > 0 || r.state === 'loading' || r.state === 'unloading')
        for (const g of r.gpus ?? room.gpus.map((x) => x.index)) busy.add(g)
    return room.gpus.some((g) => !busy.has(g.index))
  }

  /** The models loaded or being loaded now (the poll's `loaded_models`, docs/api.md §7 placement). */
  loadedNames(): string[] {
    return unique(
      [...this.rows.values()]
        .filter((r) => r.state === 'loaded' || r.state === 'loading')
        .map((r) => r.model),
    )
  }

  /** The models a job uses now, or being loaded for one (the poll's `models_in_use`). */
  inUseNames(): string[] {
    return unique(
      [...this.rows.values()].filter((r) => r.leases.size > 0 || r.state === 'loading').map((r) => r.model),
    )
  }

  /** Models being loaded now (heartbeat `loading_models`). */
  loading(): string[] {
    return unique([...this.rows.values()].filter((r) => r.state === 'loading').map((r) => r.model))
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
        ...(r.model !== r.name ? { model: r.model } : {}),
        state: r.state,
        vram_gb: r.vram_gb,
        in_use: r.leases.size,
        last_used_ms: r.last_used_ms,
        params_key: r.params_key,
        gpus: r.gpus,
        claim_gb: r.claim_gb,
      })
    }
    return out
  }

  private async readRoom(): Promise<Room> {
    const stale = this.roomStale
    this.roomStale = false
    try {
      this.lastRoom = await this.room(stale)
    } catch (e) {
      this.roomStale = true
      throw e
    }
    return this.lastRoom
  }

  /** How long the model stays unloaded here after its failed loads (ms from now; 0: none). */
  private cooldownLeft(name: string): number {
    const f = this.failedLoads.get(name)
    if (!f) return 0
    const waitMs = Math.min(FAILED_LOAD_MAX_MS, FAILED_LOAD_MS * 2 ** (f.count - 1))
    return Math.max(0, f.atMs + waitMs - this.timers.nowMs())
  }

  /**
   * The models that failed to load here and are not tried again yet, with why, how many loads in a
   * row failed, and how long until the next is tried (heartbeat `load_failures`, docs/api.md §7).
   */
  loadFailures(): { name: string; error: string; failures: number; retry_in_seconds: number }[] {
    return [...this.failedLoads]
      .map(([name, f]) => ({
        name,
        error: f.why.slice(0, 4000),
        failures: f.count,
        retry_in_seconds: Math.ceil(this.cooldownLeft(name) / 1000),
      }))
      .filter((f) => f.retry_in_seconds > 0)
  }

  /**
   * The models that failed to load here and are not tried again yet (the poll's `failed_models`,
   * docs/api.md §7): the server hands this worker no batch of them meanwhile.
   */
  coolingNames(): string[] {
    return [...this.failedLoads.keys()].filter((name) => this.cooldownLeft(name) > 0)
  }

  /** A model that failed to load here a moment ago is not loaded again yet: the job fails with why. */
  private checkCooldown(name: string) {
    const f = this.failedLoads.get(name)
    const left = this.cooldownLeft(name)
    if (!f || left <= 0) return
    throw new ModelUnavailable(
      `${name} failed to load on this worker ${Math.round((this.timers.nowMs() - f.atMs) / 1000)} s ago ` +
        `(not tried again here for ${Math.ceil(left / 1000)} s): ${f.why}`,
    )
  }

  /** The load under way that `plan` must wait for: one on GPUs it shares, or touching the same models. */
  private conflict(plan: Extract<LoadPlan, { do: 'load' }>, name: string): Op | null {
    const names = new Set([name, ...plan.unload.map((u) => u.name)])
    for (const op of this.ops) {
      // Without GPUs (one budget), or reloading a model with other params: one at a time.
      if (!op.gpus || !plan.gpus || plan.unload.some((u) => u.name === name)) return op
      if (op.gpus.some((g) => plan.gpus!.includes(g))) return op
      if ([...op.names].some((n) => names.has(n))) return op
    }
    return null
  }

  /** Whether a load under way touches `name` (its own state stands over the engine's meanwhile). */
  private touched(name: string): boolean {
    return [...this.ops].some((op) => op.names.has(name))
  }

  /**
   * Reserves what `plan` takes, at once (before any await): the models it unloads are `unloading`,
   * the job's model `loading` on its GPUs, so that the next plan sees the room taken. Null when a
   * job took a model the plan would unload since the plan was made.
   */
  private reserve(
    need: ModelNeed,
    target: string,
    key: string,
    plan: Extract<LoadPlan, { do: 'load' }>,
  ): Row[] | null {
    const unloading = plan.unload
      .map((u) => this.rows.get(u.name))
      .filter((r): r is Row => r?.state === 'loaded')
    if (unloading.some((r) => r.leases.size > 0)) return null
    for (const r of unloading) this.set(r, 'unloading')
    const row = this.rows.get(target) ?? this.copyRow(target, need.name)
    if (!unloading.includes(row)) this.claim(row, need, key, plan)
    return unloading
  }

  /** A row for a further copy of `model`, before its first load. */
  private copyRow(name: string, model: string): Row {
    const row: Row = {
      name,
      model,
      state: 'unloaded',
      gen: 0,
      vram_gb: null,
      params_key: null,
      leases: new Set(),
      last_used_ms: 0,
      gpus: null,
      claim_gb: null,
      loads: 0,
    }
    this.rows.set(name, row)
    return row
  }

  private claim(row: Row, need: ModelNeed, key: string, plan: Extract<LoadPlan, { do: 'load' }>) {
    row.vram_gb = need.vram_gb
    row.params_key = this.engine.appliesParams ? key : null
    row.gpus = plan.gpus
    row.claim_gb = plan.claim_gb
    this.set(row, 'loading')
    // Known before the load ends: a daemon killed meanwhile that adopts the engine places it.
    this.remember()
  }

  /** Unloads what was reserved for it, then loads the job's model (as `target`) where the plan says. */
  private async apply(
    need: ModelNeed,
    target: string,
    plan: Extract<LoadPlan, { do: 'load' }>,
    unloading: Row[],
  ) {
    const key = paramsKey(need.params)
    for (const row of unloading) {
      const u = plan.unload.find((x) => x.name === row.name)!
      log.info(`unloading ${u.name}: ${u.why}`, { model: u.name, why: u.why })
      try {
        await this.engine.unload(u.name)
      } catch (e) {
        this.set(row, 'loaded')
        const own = this.rows.get(target)
        if (own?.state === 'loading') {
          this.set(own, 'unloaded')
          this.forgetLoad(own)
        }
        throw new ModelUnavailable(`could not unload ${u.name} to make room: ${(e as Error).message}`)
      }
      this.set(row, 'unloaded')
      this.forgetLoad(row)
    }
    const row = this.rows.get(target)
    if (!row) throw new ModelUnavailable(`${need.name} is not among the models of the engine`)
    // Reloaded with other params: claimed once its old copy is gone.
    if (row.state !== 'loading') this.claim(row, need, key, plan)
    const started = this.timers.nowMs()
    try {
      await this.engine.load(
        target,
        this.engine.appliesParams ? { ...need.params, ...plan.extra_params } : {},
        { gpus: plan.gpus, ...(target !== need.name ? { copy_of: need.name } : {}) },
      )
    } catch (e) {
      row.error = (e as Error).message
      this.set(row, 'failed')
      this.forgetLoad(row)
      const before = this.failedLoads.get(need.name)
      this.failedLoads.set(need.name, {
        count: (before?.count ?? 0) + 1,
        atMs: this.timers.nowMs(),
        why: row.error,
      })
      log.warn(`${target} failed to load`, {
        model: need.name,
        error: row.error,
        ...(plan.gpus ? { gpus: plan.gpus } : {}),
      })
      throw new ModelUnavailable(`${need.name} failed to load: ${row.error}`)
    }
    this.failedLoads.delete(need.name)
    const seconds = Math.round(this.timers.nowMs() - started) / 1000
    this.measure(need.name, { load_seconds: seconds })
    row.last_used_ms = this.timers.nowMs()
    row.loads++
    this.set(row, 'loaded')
    this.remember()
    log.info(`${target} loaded`, {
      model: need.name,
      load_seconds: seconds,
      ...(plan.gpus ? { gpus: plan.gpus } : {}),
    })
  }

  private lease(row: Row, need: ModelNeed): ModelLease {
    const lease: Lease = { job_id: need.job_id, lost: new AbortController() }
    const started = this.timers.nowMs()
    row.leases.add(lease)
    row.last_used_ms = started
    let released = false
    return {
      name: row.model,
      instance: row.name,
      url: this.engine.urlOf(row.name),
      lost: lease.lost.signal,
      load: row.loads,
      check: () => this.check(row.name, lease.lost.signal),
      release: (answered) => {
        if (released) return
        released = true
        row.leases.delete(lease)
        const now = this.timers.nowMs()
        row.last_used_ms = now
        const seconds = (now - started) / 1000
        if (answered > 0 && seconds > 0)
          this.measure(row.model, { requests_per_second: Math.round((answered / seconds) * 100) / 100 })
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
    this.roomStale = true
    row.state = state
    this.onChange()
  }

  /** What a model was loaded for means nothing once it is not loaded. */
  private forgetLoad(row: Row) {
    row.vram_gb = null
    row.params_key = null
    row.gpus = null
    row.claim_gb = null
    this.roomStale = true
    this.remember()
  }

  private remember() {
    const out: Record<string, Remembered> = {}
    for (const r of this.rows.values())
      if (r.state === 'loaded' || r.state === 'loading')
        out[r.name] = { vram_gb: r.vram_gb, params_key: r.params_key, gpus: r.gpus, claim_gb: r.claim_gb }
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

const unique = (names: string[]) => [...new Set(names)]

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
