import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { log as rootLog } from '../lib/logger'
import type { Job } from '../protocol/worker'
import { type Backoff, retryDelay, type Timers } from './backoff'
import {
  ApiError,
  type ControlPlane,
  isBatchNotInProgress,
  isInsufficientStorage,
  isShardDoneElsewhere,
  isTransient,
} from './client'
import type { RequestLimiter } from './concurrency'
import { type Counts, executeJob, RuntimeUnavailableError } from './executor'
import { classifyFailure } from './failure'
import { type ModelLease, ModelLost, ModelUnavailable } from './models/manager'
import type { DaemonOptions } from './options'
import { requestDefaults } from './runtimes'
import type { Runtime, RuntimeSnapshot } from './runtimes/types'
import type { StateDir } from './state'

// One claimed batch or shard on this worker (docs/api.md §7, §16): check the runtime serves it, download
// its input (input_path exactly as given: for a shard it serves only the shard's lines) — with a
// managed engine, meanwhile get its model loaded (models/manager.ts; docs/worker.md) — run every
// line through the executor, upload the output with the job's job_id and assignment_id, and send
// live counts meanwhile. The job holds its model from the load until its last request is answered. It ends `completed`, `failed` (reported, so the batch or shard is
// requeued: the runtime is gone, or a shutdown stopped it) or `dropped` (the server no longer
// assigns it to us, or its batch failed elsewhere — 409 batch_not_in_progress — or another copy of
// the shard finished first — 409 shard_done_elsewhere: nothing more is said about it).

const log = rootLog.child({ component: 'worker' })

export type JobOutcome = 'completed' | 'failed' | 'dropped'

/** What the operator view shows of one running job. */
export interface JobView {
  job_id: string
  model: string
  total: number
  completed: number
  failed: number
  started_at_ms: number
  /** What it waits on before its requests start (its model loading, room in VRAM); null when running. */
  stage: string | null
}

/** What a job needs of the agent that claimed it. */
export interface JobContext {
  cp: ControlPlane
  runtime: Runtime
  state: StateDir
  opts: DaemonOptions
  timers: Timers
  /** Retry policy of control-plane calls. */
  backoff: Backoff
  /** Retry policy of inference requests. */
  requestBackoff: Backoff
  workerId: string
  /**
   * The requests in flight the job's requests share: the daemon's, or with a managed engine its
   * model's (for the lease the job holds, loaded with `params`).
   */
  limiterFor(lease: ModelLease | null, params: Record<string, unknown>): Promise<RequestLimiter>
  /** The runtime's view now. */
  snapshot(): Promise<RuntimeSnapshot>
  /** Every request of this job has started (the agent may claim the next job). */
  allStarted(): void
}

/** The job cannot run at all here; reported as a failure so the batch is requeued. */
class JobFailure extends Error {}

export class JobRun {
  readonly startedAtMs: number
  private readonly abort = new AbortController()
  private counts: Counts = { read: 0, completed: 0, failed: 0 }
  private readonly total: number
  /**
   * Why it is being stopped: `lost` (the server no longer assigns it to us: dropped without a
   * word) or `shutdown` (reported failed so the batch is requeued at once).
   */
  private stop: { kind: 'lost'; reason: string; quiet: boolean } | { kind: 'shutdown' } | null = null
  private sentProgress = ''
  private started = false
  private stage: string | null = null
  /** The copy of its model it holds (a managed engine's), once it holds one. */
  private held: string | null = null

  constructor(
    readonly job: Job,
    private readonly ctx: JobContext,
  ) {
    this.startedAtMs = ctx.timers.nowMs()
    this.total = job.total_requests ?? 0
  }

  /** Every request has started (or the job is past running them): only in-flight ones remain. */
  get allStarted() {
    return this.started
  }

  /** The copy of its model it holds now (models/manager.ts ModelLease.instance); null before. */
  get instance(): string | null {
    return this.held
  }

  view(): JobView {
    return {
      job_id: this.job.job_id,
      model: this.job.model,
      total: this.total || this.counts.read,
      completed: this.counts.completed,
      failed: this.counts.failed,
      started_at_ms: this.startedAtMs,
      stage: this.stage,
    }
  }

  /** The heartbeat's `progress` of this job. */
  progress() {
    return {
      total_prompts: this.total || this.counts.read,
      completed_prompts: this.counts.completed,
      failed_prompts: this.counts.failed,
    }
  }

  /**
   * The server no longer assigns it to us: stop, and say nothing more. `quiet`: an expected end (a
   * backup race lost, docs/api.md §16), logged as information rather than a warning.
   */
  lose(reason: string, quiet = false) {
    if (this.stop) return
    this.stop = { kind: 'lost', reason, quiet }
    this.abort.abort(new Error(reason))
  }

  /** A shutdown past its grace: stop, and report it failed so the batch is requeued. */
  stopForShutdown() {
    if (this.stop) return
    this.stop = { kind: 'shutdown' }
    this.abort.abort(new Error('shutdown'))
  }

  async run(): Promise<JobOutcome> {
    const { job, ctx } = this
    const jlog = log.child({ job_id: job.job_id })
    const dir = ctx.state.jobDir(job.assignment_id ?? job.job_id)
    const input = join(dir, 'input.jsonl')
    const output = join(dir, 'output.jsonl')
    const progress = this.progressLoop()
    let acquiring: Promise<ModelLease> | null = null
    let lease: ModelLease | null = null
    try {
      const snapshot = await ctx.snapshot()
      if (snapshot.status !== 'online') {
        throw new JobFailure(
          `runtime ${ctx.runtime.engine} at ${ctx.runtime.baseUrl} is ${snapshot.status}: ${snapshot.error ?? ''}`.trim(),
        )
      }
      if (!ctx.runtime.serves(job.model, snapshot))
        throw new JobFailure(`runtime ${ctx.runtime.engine} does not serve model ${job.model}`)
      const manager = ctx.runtime.manager
      const params = job.params ?? {}
      // An engine that takes settings per job (Ollama's options) is readied for this one.
      const engine =
        ctx.runtime.prepareJob && Object.keys(params).length > 0
          ? await ctx.runtime.prepareJob({ model: job.model, params }, this.abort.signal).catch((e) => {
              // The engine's refusal of the settings, in its words (docs/worker.md "Ollama").
              throw new JobFailure((e as Error).message)
            })
          : null
      if (!manager && !engine && Object.keys(params).length)
        jlog.debug('serving profile params are launch settings of the runtime; not applied per request', {
          params,
        })

      const signal = this.abort.signal
      // A managed engine loads the job's model while the input downloads; either failing ends both.
      const prep = new AbortController()
      const prepSignal = AbortSignal.any([signal, prep.signal])
      acquiring = manager
        ? manager
            .acquire(
              {
                job_id: job.job_id,
                name: job.model,
                vram_gb: job.vram_gb ?? null,
                params: job.params ?? {},
                // docs/api.md §7 placement rule 5: claimed for a spare GPU, where a copy of its model pays.
                spare: job.copy === true,
              },
              prepSignal,
              (stage) => {
                this.stage = stage
              },
            )
            .then((l) => {
              lease = l
              this.held = l.instance
              return l
            })
        : null
      const [bytes] = await Promise.all([
        withRetries(
          'input download',
          () => ctx.cp.download(job.input_path, input, prepSignal),
          {
            tries: 5,
            signal: prepSignal,
          },
          ctx,
        ).catch((e) => {
          prep.abort(e)
          throw e
        }),
        acquiring?.catch((e) => {
          prep.abort(e)
          throw e
        }),
      ])
      // How long the job waited for its input and, with a managed engine, its model (claim → first request).
      jlog.info('input downloaded', {
        bytes,
        ...(manager
          ? { model: job.model, ready_seconds: (ctx.timers.nowMs() - this.startedAtMs) / 1000 }
          : {}),
      })

      const held = lease as ModelLease | null
      const endpoint = job.endpoint ?? '/v1/chat/completions'
      // The model's own limiter, started from its slots (asked once per load of it).
      const limiter = await ctx.limiterFor(held, job.params ?? {})
      const counts = await executeJob(
        input,
        output,
        {
          model: engine?.model ?? job.model,
          endpoint,
          defaults: requestDefaults(ctx.runtime.engine, endpoint),
        },
        {
          runtimeUrl: held?.url ?? ctx.runtime.baseUrl,
          limiter,
          tries: ctx.opts.retries,
          requestTimeoutMs: ctx.opts.request_timeout * 1000,
          backoff: ctx.requestBackoff,
          timers: ctx.timers,
          signal: held ? AbortSignal.any([signal, held.lost]) : signal,
          ...(held ? { engineCheck: () => held.check() } : {}),
          onLine: (c) => {
            this.counts = c
          },
          onAllStarted: () => this.markAllStarted(),
        },
      )
      // Every request is answered: the model is free for another job (the upload does not need it).
      held?.release(counts.completed + counts.failed)
      await engine?.finish?.()
      this.counts = counts
      this.markAllStarted()
      if (this.stop?.kind === 'lost') throw new Error(this.stop.reason)

      // Uploading is not stopped by a shutdown: finished work is delivered. A server out of disk
      // space (507) is waited out for as long as the batch stays ours (whileFull).
      const res = await withRetries(
        'upload-results',
        () =>
          ctx.cp.uploadResults({
            job_id: job.job_id,
            worker_id: ctx.workerId,
            ...(job.assignment_id ? { assignment_id: job.assignment_id } : {}),
            completed: counts.completed,
            failed: counts.failed,
            file: output,
          }),
        { tries: 30, whileFull: this.abort.signal },
        ctx,
      )
      jlog.info('job completed', {
        completed: counts.completed,
        failed: counts.failed,
        status: res.status,
        output_file_id: res.output_file_id,
        error_file_id: res.error_file_id,
        seconds: Math.round(ctx.timers.nowMs() - this.startedAtMs) / 1000,
      })
      return 'completed'
    } catch (e) {
      if (this.stop?.kind === 'lost') {
        if (this.stop.quiet) jlog.info('job dropped', { reason: this.stop.reason })
        else jlog.warn('job dropped', { reason: this.stop.reason })
        return 'dropped'
      }
      const failure = classifyFailure('job', e)
      if (failure.do === 'stop_job') {
        if (failure.reason === 'not_holder')
          jlog.warn('job dropped: the server says it is not ours any more', { error: (e as Error).message })
        else if (failure.reason === 'worker_unknown')
          jlog.warn('job dropped: the server no longer knows this worker (removed, or its database reset)')
        else if (failure.reason === 'shard_done_elsewhere')
          jlog.info('job dropped: another copy of this shard finished first')
        else jlog.warn('job dropped: its batch is no longer in progress (failed elsewhere)')
        return 'dropped'
      }
      const message =
        this.stop?.kind === 'shutdown'
          ? 'worker shut down before finishing the job'
          : e instanceof JobFailure ||
              e instanceof RuntimeUnavailableError ||
              e instanceof ModelUnavailable ||
              e instanceof ModelLost
            ? e.message
            : `worker error: ${(e as Error).message ?? String(e)}`
      jlog.warn('job failed; reporting', { error: message })
      await this.reportFailure(message)
      return 'failed'
    } finally {
      progress.abort()
      // A load still under way for a job that ended otherwise: its lease is given back too.
      await acquiring?.catch(() => {})
      ;(lease as ModelLease | null)?.release(this.counts.completed + this.counts.failed)
      this.stage = null
      rmSync(dir, { recursive: true, force: true })
    }
  }

  private markAllStarted() {
    if (this.started) return
    this.started = true
    this.ctx.allStarted()
  }

  private async reportFailure(message: string) {
    const { job, ctx } = this
    try {
      const res = await withRetries(
        'report-failure',
        () =>
          ctx.cp.reportFailure({
            job_id: job.job_id,
            worker_id: ctx.workerId,
            error: message.slice(0, 2000),
            ...(job.assignment_id ? { assignment_id: job.assignment_id } : {}),
          }),
        { tries: 20 },
        ctx,
      )
      log.info('failure reported', { job_id: job.job_id, status: res.status, attempts: res.attempts })
    } catch (e) {
      if (isBatchNotInProgress(e) || isShardDoneElsewhere(e)) {
        log.info('failure not reported: the job is moot (its batch failed, or another copy finished)', {
          job_id: job.job_id,
        })
        return
      }
      log.warn('could not report the failure; the sweeper will requeue the batch', {
        job_id: job.job_id,
        error: (e as Error).message,
      })
    }
  }

  /** Live counts every --progress-interval while the job runs; returns its stop switch. */
  private progressLoop(): AbortController {
    const stop = new AbortController()
    void (async () => {
      for (;;) {
        await this.ctx.timers.sleep(this.ctx.opts.progress_interval * 1000, stop.signal)
        if (stop.signal.aborted) return
        this.sendProgress()
      }
    })()
    return stop
  }

  /** Sent only when the counts changed. */
  private sendProgress() {
    const { job, ctx } = this
    const c = this.counts
    const key = `${c.completed}/${c.failed}`
    if (key === this.sentProgress || this.stop?.kind === 'lost') return
    this.sentProgress = key
    ctx.cp
      .progress({
        worker_id: ctx.workerId,
        job_id: job.job_id,
        ...(job.assignment_id ? { assignment_id: job.assignment_id } : {}),
        ...(this.total ? { total_prompts: this.total } : {}),
        completed_prompts: c.completed,
        failed_prompts: c.failed,
      })
      .catch((e) => {
        const failure = classifyFailure('job', e)
        if (failure.do === 'stop_job')
          this.lose(
            failure.reason === 'not_holder'
              ? 'the server refused our progress (403)'
              : failure.reason === 'worker_unknown'
                ? 'the server no longer knows this worker (removed, or its database reset)'
                : failure.reason === 'shard_done_elsewhere'
                  ? 'another copy of this shard finished first'
                  : 'the batch is no longer in progress (failed elsewhere)',
            failure.reason === 'shard_done_elsewhere',
          )
        else {
          this.sentProgress = '' // try again next tick
          log.debug('progress not delivered', { job_id: job.job_id, error: (e as Error).message })
        }
      })
  }
}

/**
 * A control-plane call, retried on transient failures (client.ts isTransient) with the daemon's
 * one retry policy (backoff.ts retryDelay: the server's Retry-After, capped, else backoff).
 * With `whileFull`, a 507 (docs/api.md §15: the server is low on disk; nothing was stored and the batch
 * is still held, its attempts untouched) is retried later without spending a try, until that
 * signal aborts (the job was lost or is being stopped): the results are kept, and the heartbeats,
 * which run on their own loop, go on meanwhile.
 */
async function withRetries<T>(
  what: string,
  fn: () => Promise<T>,
  o: { tries: number; signal?: AbortSignal; whileFull?: AbortSignal },
  policy: { backoff: Backoff; timers: Timers },
): Promise<T> {
  let full = 0
  for (let attempt = 0; ; ) {
    try {
      return await fn()
    } catch (e) {
      if (o.whileFull && isInsufficientStorage(e)) {
        if (o.whileFull.aborted) throw e
        const wait = retryDelay(full++, policy.backoff, e.retryAfterMs)
        log.warn(`${what}: the server is out of disk space; retrying later`, { retry_in_ms: wait })
        await policy.timers.sleep(wait, o.whileFull)
        continue
      }
      attempt++
      if (!isTransient(e) || attempt >= o.tries || o.signal?.aborted) throw e
      const wait = retryDelay(attempt - 1, policy.backoff, e instanceof ApiError ? e.retryAfterMs : null)
      log.warn(`${what} failed; retrying`, {
        attempt,
        retry_in_ms: wait,
        error: (e as Error).message,
      })
      await policy.timers.sleep(wait, o.signal)
    }
  }
}
