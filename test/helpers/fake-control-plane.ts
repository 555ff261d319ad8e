// A scriptable stand-in for the control plane's /workers protocol (docs/api.md §7), for daemon tests of
// behaviour the real server cannot easily be made to show (a forgotten worker, pull_models, refusing
// progress, a restart at a chosen moment). End-to-end tests against the real server live in
// test/daemon/e2e.test.ts.
//
// Shards (docs/api.md §16): a job added with `shard` is handed out as a shard of `batch_id`: its input is
// served at `/v1/files/file-<batch_id>/content?shard=<job_id>`, and `failBatch` makes the server
// answer 409 batch_not_in_progress to every later write of the job (`doneElsewhere`: 409
// shard_done_elsewhere to its writes and its input, another copy of the shard finished first).
//
// Every body it receives is checked against the schemas the server's routes validate with
// (src/protocol/worker.ts, docs/api.md §7) and refused with the server's 400 when it does not fit; such
// a refusal is kept in `rejected`, and `stop()` throws if there is one nobody expected, so a daemon
// body the server would reject fails the daemon's tests.

import type { TSchema } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { WorkerBodies } from '../../src/protocol/worker'
import { until } from './until'

export interface FakeJob {
  job_id: string
  assignment_id: string
  input: string
  model: string
  endpoint?: string
  total_requests?: number
  /** A shard of this batch (docs/api.md §16). */
  batch_id?: string
  shard?: { index: number; first_request: number; requests: number }
  /** A backup copy of the shard (docs/api.md §16). */
  backup?: boolean
}

export interface Upload {
  job_id: string
  worker_id: string
  assignment_id: string | null
  completed: number
  failed: number
  lines: any[]
}

export interface FakeControlPlane {
  url: string
  key: string
  registrations: any[]
  heartbeats: any[]
  polls: number
  downloads: { path: string; authorization: string | null }[]
  progress: any[]
  modelProgress: any[]
  uploads: Upload[]
  failures: any[]
  /** Writes (progress, upload-results, report-failure) answered 409 (failBatch, doneElsewhere). */
  conflicts: { path: string; job_id: string }[]
  /** Paths answered with an injected failure (failNext), in order. */
  injected: string[]
  /** Bodies refused with 400 as the server would (docs/api.md §0 codes), in order. */
  rejected: { path: string; code: string; param: string | null }[]
  /** Set when a test sends bad bodies on purpose: `stop()` then does not throw over `rejected`. */
  expectRejections: boolean
  /** Queues a batch for the next poll. */
  addJob(job: Omit<FakeJob, 'assignment_id'>): FakeJob
  /** The server stops assigning the job to its worker (a requeue the worker missed). */
  unassign(jobId: string): void
  /** The job's batch failed elsewhere: its writes get 409 batch_not_in_progress from now on. */
  failBatch(jobId: string): void
  /** Another copy of the job's shard finished first: its writes get 409 shard_done_elsewhere from now on. */
  doneElsewhere(jobId: string): void
  /** The server loses every worker (its database was reset): heartbeats get 404. */
  forgetWorkers(): void
  /** Heartbeat answers carry these pull_models (once). */
  askToPull(models: unknown[]): void
  /** The next poll answer without a job carries these pull_models (docs/api.md §7). */
  askToPullAtPoll(models: unknown[]): void
  refuseProgress: boolean
  /** The next input download sends part of the file, then the connection breaks. */
  breakNextDownload: boolean
  /** Next answers of a path fail with this status (e.g. 503 while "restarting"), with Retry-After. */
  failNext(path: string, status: number, times?: number, retryAfter?: string): void
  heartbeatSeconds: number
  stop(): Promise<void>
  restart(): void
  /** Resolves once `check` holds (polling every few ms), or rejects after `ms`. */
  waitFor(check: () => boolean, what: string, ms?: number): Promise<void>
}

export function startFakeControlPlane(opts: {
  key: string
  heartbeatSeconds?: number
  /** Called as each request of the protocol arrives, with its path and job_id (if any). */
  trace?: (event: { path: string; job_id?: string }) => void
}): FakeControlPlane {
  const queue: FakeJob[] = []
  // Jobs whose writes are answered 409, with the code (failBatch, doneElsewhere).
  const moot = new Map<string, 'batch_not_in_progress' | 'shard_done_elsewhere'>()
  const assigned = new Map<string, { worker_id: string; job: FakeJob }>()
  const workers = new Set<string>()
  const failing = new Map<string, { status: number; times: number; retryAfter?: string }>()
  let pending: unknown[] = []
  let pendingAtPoll: unknown[] = []
  let seq = 0
  const cp: FakeControlPlane = {
    url: '',
    key: opts.key,
    registrations: [],
    heartbeats: [],
    polls: 0,
    downloads: [],
    progress: [],
    modelProgress: [],
    uploads: [],
    failures: [],
    conflicts: [],
    injected: [],
    rejected: [],
    expectRejections: false,
    refuseProgress: false,
    breakNextDownload: false,
    heartbeatSeconds: opts.heartbeatSeconds ?? 0.05,
    addJob(job) {
      const full = { ...job, assignment_id: `asg_${++seq}` }
      queue.push(full)
      return full
    },
    unassign(jobId) {
      assigned.delete(jobId)
    },
    failBatch(jobId) {
      moot.set(jobId, 'batch_not_in_progress')
    },
    doneElsewhere(jobId) {
      moot.set(jobId, 'shard_done_elsewhere')
    },
    forgetWorkers() {
      workers.clear()
    },
    askToPullAtPoll(models) {
      pendingAtPoll = models
    },
    askToPull(models) {
      pending = models
    },
    failNext(path, status, times = 1, retryAfter) {
      failing.set(path, { status, times, retryAfter })
    },
    stop: async () => {},
    restart: () => {},
    async waitFor(check, what, ms = 10_000) {
      await until(what, check, ms)
    },
  }

  const json = (body: unknown, status = 200) => Response.json(body, { status })
  const err = (status: number, message: string) =>
    json({ error: { message, type: 'x', code: null, param: null } }, status)
  const conflict = (path: string, body: any) => {
    const code = moot.get(body.job_id)
    if (!code) return null
    cp.conflicts.push({ path, job_id: body.job_id })
    return json(
      {
        error: {
          message:
            code === 'batch_not_in_progress'
              ? 'the batch is no longer in progress'
              : 'another copy of this shard finished first',
          type: 'conflict_error',
          code,
          param: null,
        },
      },
      409,
    )
  }
  /**
   * The server's 400 for a body that does not fit `schema` (src/http/errors.ts fromValidation: the
   * first error decides the code), or null when it fits.
   */
  const refuse = (path: string, schema: TSchema, body: unknown): Response | null => {
    const first = Value.Errors(schema, body).First()
    if (!first) return null
    const param = first.path.replace(/^\//, '').replaceAll('/', '.') || null
    const code = !param
      ? 'invalid_body'
      : first.message === 'Unexpected property'
        ? 'unknown_field'
        : first.message === 'Expected required property'
          ? 'missing_field'
          : 'invalid_value'
    cp.rejected.push({ path, code, param })
    return json(
      { error: { message: `${first.message} at ${first.path}`, type: 'invalid_request_error', code, param } },
      400,
    )
  }
  /** The JSON body of `req`, or the 400 the server gives when it does not fit `schema`. */
  const read = async (path: string, req: Request, schema: TSchema): Promise<[any, Response | null]> => {
    let body: unknown
    try {
      body = await req.json()
    } catch {
      cp.rejected.push({ path, code: 'invalid_json', param: null })
      return [null, err(400, 'the body is not JSON')]
    }
    return [body, refuse(path, schema, body)]
  }

  const holder = (body: any) => {
    const a = assigned.get(body.job_id)
    if (!a || a.worker_id !== body.worker_id) return false
    return !body.assignment_id || body.assignment_id === a.job.assignment_id
  }

  const handle = async (req: Request): Promise<Response> => {
    const path = new URL(req.url).pathname
    if (req.headers.get('authorization') !== `Bearer ${opts.key}`) return err(401, 'invalid key')
    const f = [...failing.entries()].find(([p]) => path.endsWith(p))
    if (f && f[1].times > 0) {
      f[1].times--
      cp.injected.push(path)
      const res = err(f[1].status, 'injected')
      if (f[1].retryAfter) res.headers.set('retry-after', f[1].retryAfter)
      return res
    }
    if (path === '/workers/register') {
      const [body, bad] = await read(path, req, WorkerBodies.register)
      if (bad) return bad
      cp.registrations.push(body)
      const worker_id = body.worker_id && workers.has(body.worker_id) ? body.worker_id : `wrk_fake${++seq}`
      workers.add(worker_id)
      return json({
        worker_id,
        org_id: 'org_fake',
        heartbeat_interval_seconds: cp.heartbeatSeconds,
        heartbeat_timeout_seconds: 120,
      })
    }
    const hb = /^\/workers\/([^/]+)\/heartbeat$/.exec(path)
    if (hb) {
      const [body, bad] = await read(path, req, WorkerBodies.heartbeat)
      if (bad) return bad
      const badParams = refuse(path, WorkerBodies.params, { worker_id: decodeURIComponent(hb[1]!) })
      if (badParams) return badParams
      if (!workers.has(hb[1]!)) return err(404, 'worker not found')
      cp.heartbeats.push({ worker_id: hb[1], ...body })
      const pull_models = pending
      pending = []
      return json({
        status: 'online',
        worker_id: hb[1],
        next_heartbeat_in: cp.heartbeatSeconds,
        assigned_job_ids: [...assigned.entries()].filter(([, a]) => a.worker_id === hb[1]).map(([id]) => id),
        pull_models,
      })
    }
    if (path === '/workers/poll') {
      const [body, bad] = await read(path, req, WorkerBodies.poll)
      if (bad) return bad
      const { worker_id } = body
      cp.polls++
      if (!workers.has(worker_id)) return err(404, 'worker not found')
      const job = queue.shift()
      if (!job) {
        const pull_models = pendingAtPoll
        pendingAtPoll = []
        return json(pull_models.length ? { job: null, pull_models } : { job: null })
      }
      assigned.set(job.job_id, { worker_id, job })
      const file = `file-${job.batch_id ?? job.job_id}`
      return json({
        job: {
          job_id: job.job_id,
          assignment_id: job.assignment_id,
          input_file_id: file,
          input_path: `/v1/files/${file}/content${job.shard ? `?shard=${job.job_id}` : ''}`,
          ...(job.shard ? { batch_id: job.batch_id, shard: job.shard } : {}),
          ...(job.backup ? { backup: true } : {}),
          model: job.model,
          catalogue_id: 'fake-catalogue-id',
          endpoint: job.endpoint ?? '/v1/chat/completions',
          runtime: 'openai',
          digest: null,
          params: {},
          total_requests: job.total_requests ?? job.input.split('\n').filter((l) => l.trim()).length,
        },
      })
    }
    const file = /^\/v1\/files\/file-(.+)\/content$/.exec(path)
    if (file) {
      const search = new URL(req.url).search
      cp.downloads.push({ path: path + search, authorization: req.headers.get('authorization') })
      // A shard's lines are served only under its own ?shard= (the file id is its batch's).
      const shardId = new URL(req.url).searchParams.get('shard')
      const a = assigned.get(shardId ?? file[1]!)
      if (!a || (a.job.batch_id ?? a.job.job_id) !== file[1]) return err(404, 'file not found')
      // docs/api.md §16: the input of a shard another copy finished is refused with the reason.
      if (shardId && moot.get(shardId) === 'shard_done_elsewhere') return conflict(path, { job_id: shardId })!
      if (cp.breakNextDownload) {
        cp.breakNextDownload = false
        const half = new TextEncoder().encode(a.job.input.slice(0, Math.floor(a.job.input.length / 2)))
        let sent = false
        return new Response(
          new ReadableStream({
            async pull(c) {
              if (sent) return c.error()
              sent = true
              c.enqueue(half)
              await Bun.sleep(5)
            },
          }),
          { headers: { 'content-type': 'application/jsonl' } },
        )
      }
      return new Response(a.job.input, { headers: { 'content-type': 'application/jsonl' } })
    }
    if (path === '/workers/progress') {
      const [body, bad] = await read(path, req, WorkerBodies.progress)
      if (bad) return bad
      opts.trace?.({ path, job_id: body.job_id })
      cp.progress.push(body)
      const c = conflict(path, body)
      if (c) return c
      if (cp.refuseProgress || !holder(body)) return err(403, 'not the holder')
      return json({ status: 'ok' })
    }
    if (path === '/workers/model-progress') {
      const [body, bad] = await read(path, req, WorkerBodies.modelProgress)
      if (bad) return bad
      cp.modelProgress.push(body)
      return json({ status: 'ok' })
    }
    if (path === '/workers/upload-results') {
      const form = await req.formData()
      const body = Object.fromEntries([...form.entries()].filter(([, v]) => typeof v === 'string'))
      const bad = refuse(path, WorkerBodies.uploadResults, body)
      if (bad) return bad
      opts.trace?.({ path, job_id: body.job_id as string })
      const c = conflict(path, body)
      if (c) return c
      if (!holder(body)) return err(403, 'not the holder')
      const text = await (form.get('file') as Blob).text()
      const lines = text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
      cp.uploads.push({
        job_id: body.job_id as string,
        worker_id: body.worker_id as string,
        assignment_id: (body.assignment_id as string) ?? null,
        completed: Number(body.completed),
        failed: Number(body.failed),
        lines,
      })
      assigned.delete(body.job_id as string)
      return json({
        batch_id: body.job_id,
        status: 'completed',
        output_file_id: 'file-out',
        error_file_id: null,
      })
    }
    if (path === '/workers/report-failure') {
      const [body, bad] = await read(path, req, WorkerBodies.reportFailure)
      if (bad) return bad
      opts.trace?.({ path, job_id: body.job_id })
      cp.failures.push(body)
      const c = conflict(path, body)
      if (c) return c
      if (!holder(body)) return err(403, 'not the holder')
      assigned.delete(body.job_id)
      return json({ status: 'validated', batch_id: body.job_id, attempts: 1, error: body.error })
    }
    return err(404, `no route ${path}`)
  }

  let server: ReturnType<typeof Bun.serve>
  let port = 0
  const listen = () => {
    server = Bun.serve({ port, hostname: '127.0.0.1', idleTimeout: 0, fetch: handle })
    port = server.port!
    cp.url = `http://127.0.0.1:${port}`
  }
  listen()
  cp.stop = async () => {
    await server.stop(true)
    if (cp.rejected.length && !cp.expectRejections)
      throw new Error(
        `the fake control plane refused bodies the server would: ${JSON.stringify(cp.rejected)}`,
      )
  }
  cp.restart = listen
  return cp
}
