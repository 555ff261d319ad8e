import { hostname } from 'node:os'
import { CAPABILITIES } from '../domain/capabilities'
import { backedOff, backOffDownload, type DownloadBackoff, pullPin } from '../domain/downloads'
import { log as rootLog } from '../lib/logger'
import type { HeartbeatAnswer, HeartbeatBody, Job, PullModel } from '../protocol/worker'
import { type Backoff, realTimers, retryDelay, type Timers, Wakeup } from './backoff'
import { type ApiError, ControlPlane, DAEMON_VERSION } from './client'
import { ConcurrencyController, RequestLimiter } from './concurrency'
import { classifyFailure } from './failure'
import { GpuProbe, type GpuSample, runCommand } from './gpu'
import { type JobOutcome, JobRun, type JobView } from './job'
import { type AgentState, checkMove } from './lifecycle'
import type { ModelLease } from './models/manager'
import type { Room } from './models/plan'
import type { DaemonOptions } from './options'
import { createRuntime } from './runtimes'
import type { PullProgress, Runtime, RuntimeSnapshot } from './runtimes/types'
import { StateDir } from './state'

// The worker agent (docs/api.md §0 and §7 Workers; docs/api.md §7): registers, heartbeats on its own loop, polls
// while it has free capacity (held polls: wait_seconds) and runs each claimed batch or shard
// (docs/api.md §16) as a JobRun (job.ts). Every job's requests share one limiter (concurrency.ts) —
// with a managed engine, one per loaded model, each tuned to its model — and the next job is claimed
// as soon as the running ones have no request left to start (or, on a machine of several GPUs, while
// a GPU holds no model in use), so the engine is kept busy across job boundaries: the next job's
// requests take the slots the last requests of the previous one free while its results upload. It stops a job the server no longer assigns to it, rides out control-plane restarts,
// and on SIGTERM finishes or reports its jobs. Its life cycle is the table of lifecycle.ts; time comes
// from the injected Timers, and every wait is a Wakeup that the event it waits for cuts short.

const log = rootLog.child({ component: 'worker' })

/** What the agent reports as it goes (AgentDeps.onEvent; tests wait on these instead of sleeping). */
export type AgentEvent =
  | { type: 'state'; state: AgentState }
  | { type: 'heartbeat'; ok: boolean }
  | {
      type: 'poll_skipped'
      reason: 'runtime offline' | 'at capacity' | 'requests left to start' | 'not registered'
    }
  | { type: 'job_ended'; job_id: string; outcome: JobOutcome }

export interface AgentDeps {
  runtime?: Runtime
  gpu?: { sample(): Promise<GpuSample | null> }
  /** Retry policy of control-plane calls (tests shrink it). */
  backoff?: Backoff
  /** Retry policy of inference requests. */
  requestBackoff?: Backoff
  timers?: Timers
  onEvent?: (e: AgentEvent) => void
}

const SNAPSHOT_BUDGET_MS = 5_000
/** How old a GPU sample may be for a placement nothing changed since (docs/worker.md "GPUs"). */
const ROOM_SAMPLE_MS = 2_000
const FAILED_HEARTBEAT_RETRY_MS = 5_000
const MAX_CALL_BACKOFF_MS = 30_000

export class Agent {
  readonly state: StateDir
  readonly runtime: Runtime
  private readonly cp: ControlPlane
  private readonly gpu: { sample(): Promise<GpuSample | null> }
  private readonly backoff: Backoff
  private readonly requestBackoff: Backoff
  private readonly timers: Timers
  private readonly onEvent: (e: AgentEvent) => void
  private readonly startedAtMs: number

  private lifecycle: AgentState = 'created'
  private exitCode = 0
  /** Aborted when the agent leaves `running`: the poll loop and a held poll end. */
  private readonly polling = new AbortController()
  /** Aborted on `stopping`: the grace period, registration retries and pulls end. */
  private readonly ending = new AbortController()
  /** Aborted on `stopped`: the heartbeat loop ends. */
  private readonly stopped = new AbortController()
  private readonly heartbeatWake: Wakeup
  private readonly pollWake: Wakeup
  /** Kicked whenever a job ends (the drain waits on it). */
  private readonly jobsWake: Wakeup

  private workerId: string | null = null
  private heartbeatMs = 30_000
  private pollWait: number
  private readonly jobs = new Map<string, JobRun>()
  private pulling: PullModel | null = null
  /**
   * docs/worker.md "Downloads": this daemon's own back-off after a failed download, by catalogue
   * id (src/domain/downloads.ts, the server's rule): never fetched again while it runs, even if asked.
   */
  private readonly pullBackoffs = new Map<string, DownloadBackoff & { error: string }>()
  private lastSnapshot: RuntimeSnapshot | null = null
  private runtimeOnline: boolean | null = null
  private registering: Promise<boolean> | null = null
  /** The last GPU sample (registration, heartbeats, placements): a managed engine's GPU ledger. */
  private lastGpu: GpuSample | null = null
  private lastGpuAtMs = Number.NEGATIVE_INFINITY
  /** The requests in flight at the engine, shared by every job (--concurrency). */
  readonly limiter: RequestLimiter
  /**
   * A managed engine's: one limiter per loaded model (per copy of it: ModelLease.instance), tuned to
   * it (and asked its slots) at each load.
   */
  private readonly modelLimiters = new Map<string, { load: number; limiter: Promise<RequestLimiter> }>()
  /** Each loaded copy's limit now, with its model (heartbeat `concurrency`). */
  private readonly modelLimits = new Map<string, { model: string; limit: number }>()
  private slotsAsked: Promise<void> | null = null

  constructor(
    readonly opts: DaemonOptions,
    deps: AgentDeps = {},
  ) {
    this.state = new StateDir(opts.state_dir)
    this.runtime =
      deps.runtime ??
      createRuntime(opts, this.state, {
        room: (fresh) => this.room(fresh),
        indices: () => this.lastGpu?.devices.map((d) => d.index) ?? null,
      })
    this.cp = new ControlPlane(opts.server, opts.key, opts.ca)
    this.gpu = deps.gpu ?? new GpuProbe(runCommand, opts.gpus)
    this.backoff = deps.backoff ?? { baseMs: 1000, maxMs: MAX_CALL_BACKOFF_MS }
    this.requestBackoff = deps.requestBackoff ?? { baseMs: 500, maxMs: 20_000 }
    this.timers = deps.timers ?? realTimers
    this.onEvent = deps.onEvent ?? (() => {})
    this.startedAtMs = this.timers.nowMs()
    this.heartbeatWake = new Wakeup(this.timers)
    this.pollWake = new Wakeup(this.timers)
    this.jobsWake = new Wakeup(this.timers)
    this.pollWait = opts.poll_wait
    this.limiter = this.newLimiter(null)
    // A digest found after registration (a file hashed, a model swapped in the engine) is reported
    // at once: until then that model is not advertised (runtimes/openai.ts).
    // A managed engine's change (a load ended, a job took or left its model) may free a GPU: the
    // poll loop looks again (docs/worker.md "GPUs").
    this.runtime.onInventoryChange?.(() => {
      this.heartbeatSoon()
      this.pollWake.kick()
    })
  }

  get id() {
    return this.workerId
  }

  /**
   * The VRAM a managed engine may fill (docs/worker.md "GPUs"): --vram-gb, else what the GPUs
   * report; null (unlimited) with neither.
   */
  vramBudget(): number | null {
    return this.opts.vram_gb ?? this.lastGpu?.memory_total_gb ?? null
  }

  /**
   * Where a managed engine places models (models/plan.ts): the daemon's GPUs as the driver reports
   * them (sampled again when `fresh`, or when the last sample is older than ROOM_SAMPLE_MS), else
   * one budget of --vram-gb (null: no limit).
   */
  private async room(fresh: boolean): Promise<Room> {
    if (fresh || this.timers.nowMs() - this.lastGpuAtMs > ROOM_SAMPLE_MS) await this.sampleGpu()
    const devices = this.lastGpu?.devices ?? []
    if (devices.length)
      return { gpus: devices.map((d) => ({ index: d.index, total_gb: d.total_gb, free_gb: d.free_gb })) }
    return { budget_gb: this.opts.vram_gb ?? null }
  }

  /** Jobs held at once: --max-jobs, or by default one more per GPU beyond the first with a managed engine. */
  private get maxJobs(): number {
    const gpus = this.lastGpu?.devices.length ?? 0
    return this.runtime.manager && this.opts.max_jobs_default && gpus > 1
      ? Math.max(this.opts.max_jobs, gpus + 1)
      : this.opts.max_jobs
  }

  /**
   * A limiter of its own (--concurrency); `lease`: the loaded model (the copy of it) it serves, named
   * in its log lines.
   */
  private newLimiter(lease: Pick<ModelLease, 'name' | 'instance'> | null): RequestLimiter {
    const named = lease ? { model: lease.instance } : {}
    const controller = new ConcurrencyController({
      setting: this.opts.concurrency,
      max: this.opts.max_concurrency,
      nowMs: () => this.timers.nowMs(),
      onChange: (concurrency, was, reason) => {
        if (lease) this.modelLimits.set(lease.instance, { model: lease.name, limit: concurrency })
        log.info('concurrency changed', { ...named, concurrency, was, reason })
      },
    })
    if (lease) this.modelLimits.set(lease.instance, { model: lease.name, limit: controller.limit })
    return new RequestLimiter(controller)
  }

  /**
   * The limiter a job's requests take: a managed engine's model has its own, made afresh at each
   * load of it and started from that model's slots as the engine reports them (or its profile's
   * `parallel`); another engine's jobs share one.
   */
  async limiterFor(lease: ModelLease | null, params: Record<string, unknown> = {}): Promise<RequestLimiter> {
    if (!lease) return this.limiter
    const known = this.modelLimiters.get(lease.instance)
    if (known && known.load === lease.load) return known.limiter
    const limiter = this.newLimiter(lease)
    const slots =
      this.opts.concurrency === 'auto' && this.runtime.slots
        ? this.runtime.slots(lease.instance, params).catch(() => null)
        : Promise.resolve(null)
    const made = {
      load: lease.load,
      limiter: slots.then((n) => {
        if (n) limiter.controller.engineReports(n)
        return limiter
      }),
    }
    this.modelLimiters.set(lease.instance, made)
    return made.limiter
  }

  /** The requests in flight the daemon settled on: the sum over the models (each copy) its jobs run now. */
  private concurrencyNow(): number {
    const models = new Set([...this.jobs.values()].map((r) => r.job.model))
    let sum = 0
    for (const { model, limit } of this.modelLimits.values()) if (models.has(model)) sum += limit
    return sum || this.limiter.controller.limit
  }

  /**
   * Whether the running jobs keep a managed engine busy without another: each copy of a model a job
   * uses has a job still starting requests (a job loading its model counts alone), or a job is being
   * placed. One job's requests starting keep its copy's slots full, not another's (docs/worker.md
   * "Jobs").
   */
  private requestsLeftToStart(): boolean {
    if (this.runtime.manager?.placingJobs) return true
    const started = new Map<string, boolean>()
    for (const [key, run] of this.jobs) {
      const on = run.instance ?? `job ${key}`
      started.set(on, (started.get(on) ?? true) && run.allStarted)
    }
    return started.size > 0 && [...started.values()].every((all) => !all)
  }

  get status(): AgentState {
    return this.lifecycle
  }

  /** Runs until stopped; resolves with the process exit code. */
  async run(): Promise<number> {
    // shutdown() before run(): nothing to do.
    if (this.lifecycle === 'stopping') {
      this.enter('stopped')
      return this.exitCode
    }
    this.enter('starting')
    const unlock = this.state.lock()
    let heartbeats: Promise<void> | null = null
    try {
      this.state.clearJobs()
      // The GPUs are known before the engine starts: the router runs on them (docs/worker.md "GPUs").
      const gpu = await this.sampleGpu()
      if (gpu && this.runtime.manager && this.opts.vram_gb !== undefined)
        log.warn('--vram-gb is only reported: with GPUs, each model is placed by the memory of its GPUs', {
          gpus: gpu.devices.map((d) => d.index),
        })
      await this.runtime.prepare()
      if (await this.register()) {
        if (this.lifecycle === 'starting') this.enter('running')
        heartbeats = this.heartbeatLoop()
        await this.pollLoop()
      }
      await this.drain()
      return this.exitCode
    } finally {
      // Reached early only by an exception (the runtime's prepare(), the state directory).
      const now: AgentState = this.status
      if (now !== 'stopped') {
        if (now !== 'stopping') this.enter('stopping')
        this.enter('stopped')
      }
      await heartbeats
      // A managed engine is this daemon's child: it stops with it (engines/child.ts).
      await this.runtime
        .close?.()
        .catch((e) => log.warn('could not stop the engine', { error: (e as Error).message }))
      unlock()
    }
  }

  /**
   * Graceful stop (SIGTERM): no more polling; running jobs get the grace period to finish, then are
   * stopped and reported as failed. `now` skips the grace (a second signal).
   */
  shutdown(now = false) {
    const s = this.lifecycle
    if (s === 'stopping' || s === 'stopped' || (s === 'draining' && !now)) return
    log.info('shutting down', {
      running_jobs: this.jobs.size,
      grace_seconds: now ? 0 : this.opts.shutdown_grace,
    })
    // Before registration there is nothing to drain.
    this.enter(now || s === 'created' || s === 'starting' ? 'stopping' : 'draining')
  }

  jobViews(): JobView[] {
    return [...this.jobs.values()].map((run) => run.view())
  }

  /** The one place the life cycle moves (lifecycle.ts), with what each move sets off. */
  private enter(next: AgentState) {
    checkMove(this.lifecycle, next)
    this.lifecycle = next
    if (next === 'draining' || next === 'stopping') {
      this.polling.abort()
      this.pollWake.kick()
    }
    if (next === 'stopping') {
      this.ending.abort()
      for (const run of this.jobs.values()) run.stopForShutdown()
      this.jobsWake.kick()
    }
    if (next === 'stopped') {
      this.stopped.abort()
      this.heartbeatWake.kick()
    }
    this.onEvent({ type: 'state', state: next })
  }

  private fatal(message: string) {
    log.error(message)
    this.exitCode = 1
    if (this.lifecycle !== 'stopping' && this.lifecycle !== 'stopped') this.enter('stopping')
  }

  // ── registration ────────────────────────────────────────────────────────────────────────────

  /**
   * Registers (retrying while the server is unreachable); false after a fatal answer or a stop.
   * The heartbeat and the poll loop may both find the worker unknown: they share one registration.
   */
  private register(): Promise<boolean> {
    this.registering ??= this.registerOnce().finally(() => {
      this.registering = null
    })
    return this.registering
  }

  private async registerOnce(): Promise<boolean> {
    for (let attempt = 0; !this.ending.signal.aborted; attempt++) {
      const identity = this.state.identity()
      // A worker_id is only meaningful to the server that issued it.
      const reuse = identity.server === this.opts.server ? identity.worker_id : undefined
      try {
        const snapshot = await this.freshSnapshot()
        const gpu = await this.sampleGpu()
        const res = await this.cp.register({
          name: this.opts.name,
          hostname: hostname(),
          machine_id: identity.machine_id,
          ...(reuse ? { worker_id: reuse } : {}),
          daemon_version: DAEMON_VERSION,
          max_concurrent_jobs: this.maxJobs,
          // docs/api.md §7 pull_models: a runtime that cannot download is never asked to.
          max_download_gb: this.runtime.pull ? this.opts.max_download_gb : 0,
          ...(this.opts.shards || this.runtime.manager
            ? {
                capabilities: {
                  ...(this.opts.shards ? { shards: true } : {}),
                  // docs/api.md §7: the daemon loads what a job needs, so models on disk can be claimed.
                  ...(this.runtime.manager ? { loads: true } : {}),
                },
              }
            : {}),
          models: snapshot.models,
          runtimes: [
            {
              engine: this.runtime.engine,
              base_url: this.runtime.baseUrl,
              status: snapshot.status,
              inventory: snapshot.inventory,
              // docs/api.md §7: every capability stated, so the server counts exactly these.
              capabilities: Object.fromEntries(
                CAPABILITIES.map((c) => [c, this.opts.capabilities.includes(c)]),
              ),
            },
          ],
          gpus: (gpu?.gpus ?? []).map((g, i) => ({ ...g, index: gpu!.devices[i]!.index })),
        })
        this.workerId = res.worker_id
        this.heartbeatMs = (res.heartbeat_interval_seconds || 30) * 1000
        this.state.saveWorkerId(res.worker_id, this.opts.server)
        log.info('registered', {
          worker_id: res.worker_id,
          org_id: res.org_id,
          runtime: this.runtime.engine,
          runtime_url: this.runtime.baseUrl,
          runtime_status: snapshot.status,
          ...(this.runtime.manager
            ? {
                loads: true,
                ...(gpu?.devices.length
                  ? { gpus: gpu.devices.map((d) => `${d.index}: ${d.name} ${d.total_gb} GB`) }
                  : { vram_budget_gb: this.vramBudget() }),
              }
            : {}),
          models: snapshot.models.length,
          gpus: gpu?.gpus.length ?? 0,
          shards: this.opts.shards,
          max_jobs: this.maxJobs,
          concurrency:
            this.opts.concurrency === 'auto'
              ? `auto (${this.limiter.controller.limit})`
              : this.opts.concurrency,
        })
        return true
      } catch (e) {
        const failure = classifyFailure('register', e, { reusedWorkerId: !!reuse })
        if (failure.do === 'reregister') {
          // Our stored worker_id is not this org's (or is gone): register afresh.
          log.warn('stored worker_id refused; registering as a new worker', {
            status: (e as ApiError).status,
          })
          this.state.saveWorkerId('', '')
          continue
        }
        if (failure.do === 'fatal') {
          this.fatal(failure.message)
          return false
        }
        const wait = retryDelay(attempt, this.backoff, null)
        log.warn('registration failed; retrying', { error: (e as Error).message, retry_in_ms: wait })
        await this.timers.sleep(wait, this.ending.signal)
      }
    }
    return false
  }

  // ── heartbeat ───────────────────────────────────────────────────────────────────────────────
  // Its own loop: nothing the jobs do waits on it and it waits on nothing the jobs do, so a long
  // batch never delays liveness (docs/api.md §10: every 30 s; the server's heartbeat_interval_seconds).
  // It runs until `stopped`, so a draining worker still reports its jobs' progress.

  private async heartbeatLoop() {
    while (!this.stopped.signal.aborted) {
      const next = await this.heartbeat()
      await this.heartbeatWake.wait(next, this.stopped.signal)
    }
  }

  /** A heartbeat now (a job started or ended, a pull changed the inventory). */
  private heartbeatSoon() {
    this.heartbeatWake.kick()
  }

  /** One heartbeat; returns the delay until the next. */
  private async heartbeat(): Promise<number> {
    if (!this.workerId) return this.heartbeatMs
    const sentAt = this.timers.nowMs()
    let next = this.heartbeatMs
    let ok = false
    try {
      const res = await this.cp.heartbeat(this.workerId, await this.heartbeatBody())
      if (res.next_heartbeat_in) next = res.next_heartbeat_in * 1000
      this.onHeartbeat(res, sentAt)
      ok = true
    } catch (e) {
      const failure = classifyFailure('heartbeat', e)
      if (failure.do === 'reregister') {
        if (failure.forgetWorkerId) {
          log.warn('heartbeat refused: worker not owned by this key; registering again')
          this.state.saveWorkerId('', '')
        } else {
          // The server does not know us (an admin removed this worker, or its database was reset):
          // register again; the server makes a new worker (docs/api.md §7).
          log.warn(
            'heartbeat: worker unknown to the server (removed, or its database reset); registering anew',
            {
              worker_id: this.workerId,
            },
          )
        }
        if (await this.register()) next = 0
      } else if (failure.do === 'fatal') {
        this.fatal(failure.message)
      } else {
        log.warn('heartbeat failed', { error: (e as Error).message })
        next = Math.min(next, FAILED_HEARTBEAT_RETRY_MS)
      }
    }
    this.onEvent({ type: 'heartbeat', ok })
    return next
  }

  private async heartbeatBody(): Promise<HeartbeatBody> {
    const [snapshot, gpu] = await Promise.all([this.heartbeatSnapshot(), this.sampleGpu()])
    const manager = this.runtime.manager
    const stats = manager?.stats() ?? []
    const first = this.jobs.values().next().value as JobRun | undefined
    const vramOverride = this.opts.vram_gb
    const vramTotal = vramOverride ?? gpu?.memory_total_gb
    const vramAvailable =
      vramTotal === undefined ? undefined : Math.max(0, round(vramTotal - (gpu?.memory_used_gb ?? 0)))
    return {
      activity: this.jobs.size > 0 ? 'busy' : this.pulling ? 'downloading_model' : 'idle',
      ...(first ? { current_job_id: first.job.job_id, progress: first.progress() } : {}),
      ...(gpu?.utilization != null ? { gpu_utilization: gpu.utilization } : {}),
      ...(gpu ? { gpu_memory_used_gb: gpu.memory_used_gb } : {}),
      ...(vramTotal !== undefined ? { vram_total_gb: vramTotal, vram_available_gb: vramAvailable } : {}),
      loaded_models: snapshot.loaded,
      inventory: snapshot.inventory,
      uptime_seconds: Math.floor((this.timers.nowMs() - this.startedAtMs) / 1000),
      concurrency: this.concurrencyNow(),
      // docs/api.md §7 (ext): what a managed engine is loading, and what was measured per model.
      ...(manager ? { loading_models: manager.loading() } : {}),
      ...(stats.length ? { model_stats: stats } : {}),
      // docs/api.md §7 (ext): the models it does not load again yet (docs/worker.md "Faults").
      ...(manager ? { load_failures: manager.loadFailures() } : {}),
      // docs/api.md §7 (ext): each GPU's memory now, and the GPUs each loaded model sits on.
      ...(gpu
        ? {
            gpus: gpu.devices.map((d) => ({
              index: d.index,
              memory_used_gb: d.used_gb,
              memory_total_gb: d.total_gb,
              ...(d.utilization !== null ? { utilization: d.utilization } : {}),
            })),
          }
        : {}),
      ...(manager && gpu ? { model_gpus: manager.placements() } : {}),
    }
  }

  private async sampleGpu(): Promise<GpuSample | null> {
    const gpu = await this.gpu.sample()
    // A probe that failed once does not make the budget unlimited.
    if (gpu) {
      this.lastGpu = gpu
      this.lastGpuAtMs = this.timers.nowMs()
    }
    return gpu
  }

  private onHeartbeat(res: HeartbeatAnswer, sentAt: number) {
    if (Array.isArray(res.assigned_job_ids)) {
      const assigned = new Set(res.assigned_job_ids)
      for (const run of this.jobs.values()) {
        // A job claimed after this heartbeat left cannot be in its answer yet.
        if (run.startedAtMs < sentAt && !assigned.has(run.job.job_id))
          run.lose('the server no longer assigns this job to this worker')
      }
    }
    for (const task of res.pull_models ?? []) this.maybePull(task)
  }

  /** The runtime's view now (registration, poll, job start). */
  private async freshSnapshot(): Promise<RuntimeSnapshot> {
    const s = await this.runtime.snapshot()
    if (s.status === 'online') this.lastSnapshot = s
    if (s.status === 'online' && !this.runtimeOnline) {
      log.info('runtime reachable', { runtime: this.runtime.baseUrl })
      // Back after an outage (an engine restarted): the server learns at once what it holds again.
      if (this.runtimeOnline === false) this.heartbeatSoon()
    }
    if (s.status !== 'online' && this.runtimeOnline !== false)
      log.warn('runtime not reachable; not polling', { runtime: this.runtime.baseUrl, error: s.error })
    this.runtimeOnline = s.status === 'online'
    return s
  }

  /**
   * The heartbeat's view of the runtime. While the runtime is slow or failing in the middle of our
   * own batch, the last good inventory stands in (within a time budget, so liveness never waits on a
   * busy runtime), and a loaded server is not reported as having lost its models.
   */
  private async heartbeatSnapshot(): Promise<RuntimeSnapshot> {
    const budget = new AbortController()
    const s = await Promise.race([
      this.freshSnapshot(),
      this.timers.sleep(SNAPSHOT_BUDGET_MS, budget.signal).then(() => null),
    ])
    budget.abort()
    if (s && (s.status === 'online' || this.jobs.size === 0 || !this.lastSnapshot)) return s
    return this.lastSnapshot ?? { status: 'offline', inventory: [], models: [], loaded: [] }
  }

  // ── model pulls (docs/api.md §7 pull_models) ────────────────────────────────────────────────────

  private maybePull(task: PullModel) {
    const pull = this.runtime.pull?.bind(this.runtime)
    if (!pull || this.pulling || this.lifecycle !== 'running') return
    if (task.runtime !== this.runtime.engine && task.runtime !== this.runtime.kind) return
    const plog = log.child({ model: task.runtime_model_id, catalogue_id: task.catalogue_id })
    const base = {
      worker_id: this.workerId!,
      model: task.runtime_model_id,
      ...(task.digest ? { digest: task.digest } : {}),
    }
    const pin = pullPin(task)
    const nowSeconds = () => this.timers.nowMs() / 1000
    const held = this.pullBackoffs.get(task.catalogue_id)
    if (backedOff(held, pin, nowSeconds())) {
      // Asked while this daemon backs off (a server that lost its own back-off): refused, saying so.
      const until = new Date(held!.retry_at * 1000).toISOString()
      plog.warn('model pull refused: a download of it failed here and is not retried yet', {
        retry_at: until,
        error: held!.error,
      })
      void this.cp
        .modelProgress({
          ...base,
          status: 'failed',
          cause: 'backed_off',
          error: `not fetched again before ${until}: ${held!.error}`.slice(0, 2000),
        })
        .catch((e) => plog.warn('model-progress failed', { error: e.message }))
      return
    }
    this.pulling = task
    plog.info('pulling model for the catalogue', { size_gb: task.size_gb })
    let lastSent = Number.NEGATIVE_INFINITY
    // One report at a time, in order: a late `downloading` must never land after `verifying` or
    // `completed` (the server keeps the last step on the ask, docs/api.md §7 model-progress).
    const send = serially(
      (p: PullProgress | { status: 'failed'; error: string; cause?: 'stopped' | 'backed_off' }) =>
        this.cp
          .modelProgress({ ...base, ...p })
          .catch((e) => plog.warn('model-progress failed', { error: e.message })),
    )
    const onProgress = (p: PullProgress) => {
      const now = this.timers.nowMs()
      if (p.status === 'downloading' && now - lastSent < this.opts.progress_interval * 1000) return
      lastSent = now
      void send(p)
    }
    this.heartbeatSoon() // activity downloading_model
    void pull(task, onProgress, this.ending.signal)
      .then(async () => {
        plog.info('model pulled')
        this.pullBackoffs.delete(task.catalogue_id)
        await send({ status: 'completed' })
      })
      .catch(async (e) => {
        const error = (e as Error).message
        // A stop (the daemon shutting down) is no failure of the download: its partials stay.
        const stopped = this.ending.signal.aborted
        if (stopped) plog.info('model pull stopped', { error })
        else {
          const next = backOffDownload(this.pullBackoffs.get(task.catalogue_id), pin, nowSeconds())
          this.pullBackoffs.set(task.catalogue_id, { ...next, error })
          plog.warn('model pull failed; not fetched again here until retry_at', {
            error,
            failures: next.failures,
            retry_at: new Date(next.retry_at * 1000).toISOString(),
          })
        }
        // docs/api.md §7 model-progress: the reason travels with the failure (at most 2000 characters).
        await send({
          status: 'failed',
          error: error.slice(0, 2000),
          ...(stopped ? { cause: 'stopped' as const } : {}),
        })
      })
      .finally(() => {
        this.pulling = null
        this.heartbeatSoon()
        this.pollWake.kick()
      })
  }

  // ── polling ────────────────────────────────────────────────────────────────────────────────

  private async pollLoop() {
    let failures = 0
    while (this.lifecycle === 'running') {
      let wait = this.opts.poll_interval * 1000
      const skip = !this.workerId
        ? 'not registered'
        : this.jobs.size >= this.maxJobs
          ? 'at capacity'
          : // A job still starting requests keeps the engine busy; a second would only hoard a
            // batch or shard another worker could run now — unless a GPU holds no model in use,
            // where a job for another model would run beside it (docs/worker.md "GPUs").
            (this.runtime.manager
                ? this.requestsLeftToStart()
                : [...this.jobs.values()].some((r) => !r.allStarted)) && !this.runtime.manager?.idleGpu()
            ? 'requests left to start'
            : // Claiming a batch we cannot run would only burn one of its attempts.
              (await this.freshSnapshot()).status !== 'online'
              ? 'runtime offline'
              : null
      if (this.lifecycle !== 'running') break
      if (skip) this.onEvent({ type: 'poll_skipped', reason: skip })
      else {
        try {
          const asked = this.timers.nowMs()
          // docs/api.md §7 placement: with a job running and a GPU idle, another model is welcome.
          const spareGpu = this.jobs.size > 0 && this.runtime.manager?.idleGpu() === true
          const { job, pull_models } = await this.cp.poll(this.workerId!, {
            waitSeconds: this.pollWait,
            signal: this.polling.signal,
            spareGpu,
            loadedModels: this.runtime.manager?.loadedNames(),
            modelsInUse: this.runtime.manager?.inUseNames(),
            failedModels: this.runtime.manager?.coolingNames(),
          })
          failures = 0
          // docs/api.md §7: with no job, a download asked of this worker now (as a heartbeat would).
          for (const task of pull_models ?? []) this.maybePull(task)
          if (job) {
            // Even one claimed as a shutdown began: the drain runs it or reports it for a requeue.
            this.startJob(job)
            continue
          }
          // A server that held the poll (docs/api.md §7 wait_seconds) has already waited: ask again.
          if (this.pollWait > 0 && this.timers.nowMs() - asked >= this.pollWait * 1000) wait = 0
        } catch (e) {
          if (this.polling.signal.aborted) break
          const failure = classifyFailure('poll', e, { waitSeconds: this.pollWait })
          if (failure.do === 'fatal') this.fatal(failure.message)
          else if (failure.do === 'poll_plainly') {
            // A server older than wait_seconds refuses the field: poll plainly.
            log.warn('the server does not hold polls (wait_seconds refused); polling plainly')
            this.pollWait = 0
            wait = 0
          } else if (failure.do === 'reregister') {
            log.warn('poll refused; registering again', { status: (e as ApiError).status })
            if (failure.forgetWorkerId) this.state.saveWorkerId('', '')
            await this.register()
          } else {
            wait = Math.max(wait, retryDelay(failures++, this.backoff, null))
            log.warn('poll failed', { error: (e as Error).message, retry_in_ms: wait })
          }
        }
      }
      await this.pollWake.wait(wait, this.polling.signal)
    }
  }

  // ── jobs (job.ts) ───────────────────────────────────────────────────────────────────────────

  private startJob(job: Job) {
    const run = new JobRun(job, {
      cp: this.cp,
      runtime: this.runtime,
      state: this.state,
      opts: this.opts,
      timers: this.timers,
      backoff: this.backoff,
      requestBackoff: this.requestBackoff,
      workerId: this.workerId!,
      limiterFor: (lease, params) => this.limiterFor(lease, params),
      snapshot: () => this.freshSnapshot(),
      // Nothing left to start: claim the next job now, so its requests are ready for the slots.
      allStarted: () => this.pollWake.kick(),
    })
    // One run per assignment: a shard handed to this worker again (requeued and re-taken, or a backup
    // copy of a shard it lost while stalled) runs beside a stale run of the same job_id until that
    // one hears it is stale (docs/api.md §16).
    const runKey = job.assignment_id ?? job.job_id
    this.jobs.set(runKey, run)
    if (!this.runtime.manager) this.askEngineSlots()
    log.info('job claimed', {
      job_id: job.job_id,
      ...(job.shard ? { batch_id: job.batch_id, shard: job.shard.index } : {}),
      ...(job.backup ? { backup: true } : {}),
      ...(job.copy ? { copy: true } : {}),
      assignment_id: job.assignment_id,
      model: job.model,
      catalogue_id: job.catalogue_id,
      endpoint: job.endpoint,
      total_requests: job.total_requests,
    })
    if (this.lifecycle === 'stopping') run.stopForShutdown()
    this.heartbeatSoon() // activity busy, current_job_id
    void run.run().then((outcome) => {
      this.jobs.delete(runKey)
      this.onEvent({ type: 'job_ended', job_id: job.job_id, outcome })
      this.heartbeatSoon()
      this.pollWake.kick()
      this.jobsWake.kick()
    })
  }

  /**
   * --concurrency auto starts from the engine's own figure of its parallel slots when it gives one
   * (llama.cpp /props total_slots); asked once the engine answers at all.
   */
  private askEngineSlots() {
    if (this.opts.concurrency !== 'auto' || this.slotsAsked || !this.runtime.slots) return
    this.slotsAsked = this.runtime
      .slots()
      .then((slots) => {
        if (slots) this.limiter.controller.engineReports(slots)
        this.limiter.pump()
      })
      // Not reachable now: ask again at the next job.
      .catch(() => {
        this.slotsAsked = null
      })
  }

  /**
   * After the poll loop: while draining, running jobs get the grace period; then (`stopping`) the
   * rest are stopped and reported, and the agent is `stopped` once every job has ended.
   */
  private async drain() {
    if (this.lifecycle === 'draining') {
      const deadline = this.timers.nowMs() + this.opts.shutdown_grace * 1000
      while (this.jobs.size > 0 && !this.ending.signal.aborted && this.timers.nowMs() < deadline)
        await this.jobsWake.wait(deadline - this.timers.nowMs(), this.ending.signal)
    }
    if (this.lifecycle === 'draining') this.enter('stopping')
    while (this.jobs.size > 0) await this.jobsWake.wait(MAX_CALL_BACKOFF_MS)
    this.enter('stopped')
  }
}

const round = (n: number) => Math.round(n * 100) / 100

/** `fn` called one at a time, in the order of the calls: each waits for the one before to settle. */
export function serially<T>(fn: (x: T) => Promise<unknown>): (x: T) => Promise<void> {
  let last: Promise<unknown> = Promise.resolve()
  return (x) => {
    const next = last.then(() => fn(x))
    last = next.catch(() => {})
    return next.then(() => {})
  }
}
