import { writeFileSync } from 'node:fs'
import pkg from '../../package.json'
import { log } from '../lib/logger'
import { cleartextWarning, sendsInClear, trusting } from '../lib/tls-client'
import type {
  HeartbeatAnswer,
  HeartbeatBody,
  ModelProgressBody,
  PollAnswer,
  ProgressBody,
  RegisterAnswer,
  RegisterBody,
  ReportFailureAnswer,
  ReportFailureBody,
  UploadResultsAnswer,
  UploadResultsFields,
} from '../protocol/worker'
import { retryAfterMs } from './backoff'

// The control-plane side of docs/api.md §7, as the daemon speaks it. Bodies and answers are typed from
// the protocol's one schema (src/protocol/worker.ts), the one the server's routes validate with. Every call carries the worker key as
// a bearer token; the key never appears in an error message or a log field.

export const DAEMON_VERSION = pkg.version

/** The server answered with a non-2xx status (docs/api.md §0 envelope when it is JSON). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
    readonly retryAfterMs: number | null = null,
  ) {
    super(message)
  }
  /** Worth retrying later: the server is overloaded, restarting or broken for now. */
  get transient() {
    return this.status === 429 || this.status >= 500
  }
}

/** docs/api.md §16: the batch failed elsewhere (a shard ran out of attempts); this job is moot. */
export const isBatchNotInProgress = (e: unknown): e is ApiError =>
  e instanceof ApiError && e.status === 409 && e.code === 'batch_not_in_progress'

/** docs/api.md §16 backup copies: another copy of this shard finished first; this job is moot. */
export const isShardDoneElsewhere = (e: unknown): e is ApiError =>
  e instanceof ApiError && e.status === 409 && e.code === 'shard_done_elsewhere'

/**
 * docs/api.md §7: the server knows no worker by this id (an admin removed it, docs/api.md §3, or the
 * database was reset); a job it held is moot.
 */
export const isWorkerUnknown = (e: unknown): e is ApiError =>
  e instanceof ApiError && e.status === 404 && e.code === 'worker_not_found'

/** The server could not be reached, or the answer did not arrive in time. */
export class TransportError extends Error {}

/** docs/api.md §15: the server is low on disk space and stored nothing; the same call may succeed later. */
export const isInsufficientStorage = (e: unknown): e is ApiError => e instanceof ApiError && e.status === 507

/** Retry after the network or the server failed; never after a 4xx (the answer will not change). */
export const isTransient = (e: unknown) =>
  e instanceof TransportError || (e instanceof ApiError && e.transient)

const CALL_TIMEOUT_MS = 30_000

export class ControlPlane {
  private readonly headers: Record<string, string>
  private readonly tls: ReturnType<typeof trusting>

  constructor(
    readonly baseUrl: string,
    key: string,
    /** --ca-file's PEM (docs/worker.md). */
    ca?: string,
  ) {
    this.headers = { authorization: `Bearer ${key}`, 'user-agent': `gridkeep-worker/${DAEMON_VERSION}` }
    this.tls = trusting(ca)
    // Every call carries the key: said once, here (docs/deployment.md "TLS on the binary").
    if (sendsInClear(baseUrl)) log.warn(cleartextWarning('the worker key', baseUrl))
  }

  register(body: RegisterBody) {
    return this.json<RegisterAnswer>('POST', '/workers/register', body)
  }

  heartbeat(workerId: string, body: HeartbeatBody) {
    return this.json<HeartbeatAnswer>('POST', `/workers/${encodeURIComponent(workerId)}/heartbeat`, body)
  }

  /**
   * Claims a batch. With `waitSeconds` the server holds the poll until a batch is claimable or the
   * wait ends (docs/api.md §7 wait_seconds); `signal` ends a held poll early (shutdown).
   */
  async poll(
    workerId: string,
    o: {
      waitSeconds?: number
      signal?: AbortSignal
      spareGpu?: boolean
      loadedModels?: string[]
      modelsInUse?: string[]
      failedModels?: string[]
    } = {},
  ): Promise<PollAnswer> {
    const wait = o.waitSeconds ?? 0
    return this.json<PollAnswer>(
      'POST',
      '/workers/poll',
      {
        worker_id: workerId,
        ...(wait > 0 ? { wait_seconds: wait } : {}),
        ...(o.spareGpu ? { spare_gpu: true } : {}),
        ...(o.loadedModels ? { loaded_models: o.loadedModels } : {}),
        ...(o.modelsInUse ? { models_in_use: o.modelsInUse } : {}),
        ...(o.failedModels?.length ? { failed_models: o.failedModels } : {}),
      },
      { signal: o.signal, timeoutMs: CALL_TIMEOUT_MS + wait * 1000 },
    )
  }

  progress(body: ProgressBody) {
    return this.json<{ status: string }>('POST', '/workers/progress', body)
  }

  modelProgress(body: ModelProgressBody) {
    return this.json<unknown>('POST', '/workers/model-progress', body)
  }

  reportFailure(body: ReportFailureBody) {
    return this.json<ReportFailureAnswer>('POST', '/workers/report-failure', body)
  }

  /** Streams the job input (GET input_path with the worker key) to `dest`; returns its byte count. */
  async download(inputPath: string, dest: string, signal?: AbortSignal): Promise<number> {
    const res = await this.send('GET', inputPath, undefined, signal, 0)
    if (!res.body) throw new TransportError('empty input file response')
    let bytes = 0
    // A FileSink writes over an existing file without truncating it: a retried download must
    // start from an empty file, not on top of the bytes of the broken attempt.
    writeFileSync(dest, '')
    const sink = Bun.file(dest).writer({ highWaterMark: 1 << 20 })
    try {
      for await (const chunk of res.body) {
        sink.write(chunk)
        bytes += chunk.byteLength
      }
    } catch (e) {
      if (signal?.aborted) throw e
      throw new TransportError(`input download broke off: ${(e as Error).message}`)
    } finally {
      await sink.end()
    }
    return bytes
  }

  /**
   * Multipart upload of the output file (docs/api.md §7 Upload results), streamed from disk: the body is
   * generated chunk by chunk (fields, then the file), so a 50,000-line output is never held in
   * memory (a FormData holding the file would be).
   */
  async uploadResults(args: {
    job_id: string
    worker_id: string
    assignment_id?: string
    completed: number
    failed: number
    file: string
  }): Promise<UploadResultsAnswer> {
    const fields: UploadResultsFields = {
      job_id: args.job_id,
      worker_id: args.worker_id,
      ...(args.assignment_id ? { assignment_id: args.assignment_id } : {}),
      completed: String(args.completed),
      failed: String(args.failed),
    }
    const { body, contentType } = multipart(fields, 'file', 'output.jsonl', args.file)
    // No overall time limit: a large file on a slow link legitimately takes long.
    const res = await this.send('POST', '/workers/upload-results', body, undefined, 0, contentType)
    return (await res.json()) as UploadResultsAnswer
  }

  private async json<T>(
    method: string,
    path: string,
    body: unknown,
    o: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<T> {
    const res = await this.send(method, path, JSON.stringify(body), o.signal, o.timeoutMs ?? CALL_TIMEOUT_MS)
    const text = await res.text()
    try {
      return (text ? JSON.parse(text) : {}) as T
    } catch {
      throw new ApiError(res.status, null, `${method} ${path}: answer is not JSON`)
    }
  }

  private async send(
    method: string,
    path: string,
    body: string | ReadableStream<Uint8Array> | undefined,
    signal: AbortSignal | undefined,
    timeoutMs: number,
    contentType?: string,
  ): Promise<Response> {
    const headers: Record<string, string> = { ...this.headers }
    if (typeof body === 'string') headers['content-type'] = 'application/json'
    if (contentType) headers['content-type'] = contentType
    const signals = [signal, timeoutMs ? AbortSignal.timeout(timeoutMs) : undefined].filter(
      (s): s is AbortSignal => !!s,
    )
    let res: Response
    try {
      res = await fetch(this.baseUrl + path, {
        method,
        headers,
        body,
        signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
        ...this.tls,
      })
    } catch (e) {
      if (signal?.aborted) throw e
      throw new TransportError(`${method} ${path}: ${(e as Error).message}`)
    }
    if (res.ok) return res
    const text = await res.text().catch(() => '')
    let code: string | null = null
    let message = text.slice(0, 500)
    try {
      const env = JSON.parse(text)
      code = env?.error?.code ?? null
      message = env?.error?.message ?? message
    } catch {}
    throw new ApiError(
      res.status,
      code,
      `${method} ${path} → ${res.status}: ${message}`,
      retryAfterMs(res.headers.get('retry-after')),
    )
  }
}

/** A multipart/form-data body: text fields, then one file streamed from disk. */
export function multipart(
  fields: Record<string, string>,
  fileField: string,
  filename: string,
  path: string,
): { body: ReadableStream<Uint8Array>; contentType: string } {
  const boundary = `gridkeep-${crypto.randomUUID()}`
  const enc = new TextEncoder()
  let head = ''
  for (const [name, value] of Object.entries(fields))
    head += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`
  head += `--${boundary}\r\nContent-Disposition: form-data; name="${fileField}"; filename="${filename}"\r\n`
  head += 'Content-Type: application/jsonl\r\n\r\n'
  const tail = `\r\n--${boundary}--\r\n`
  let reader: { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(): Promise<void> } | null =
    null
  let stage: 'head' | 'file' | 'done' = 'head'
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (stage === 'head') {
        stage = 'file'
        reader = Bun.file(path).stream().getReader()
        controller.enqueue(enc.encode(head))
        return
      }
      if (stage === 'file') {
        const { value, done } = await reader!.read()
        if (!done) {
          controller.enqueue(value)
          return
        }
        stage = 'done'
        controller.enqueue(enc.encode(tail))
        return
      }
      controller.close()
    },
    cancel() {
      void reader?.cancel()
    },
  })
  return { body, contentType: `multipart/form-data; boundary=${boundary}` }
}
