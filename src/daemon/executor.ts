import { writeFileSync } from 'node:fs'
import { randomBase62 } from '../lib/ids'
import { readLines } from '../lib/read-lines'
import { type Backoff, realTimers, retryAfterMs, retryDelay, type Timers } from './backoff'
import { fixedLimiter, type RequestLimiter } from './concurrency'
import { reportCachedTokens } from './runtimes/cached-tokens'
import { MAX_INPUT_LINE_BYTES } from './runtimes/types'

// Runs every line of a job's input against the runtime and writes one OpenAI batch output line per
// request (docs/api.md §7: {id, custom_id, response:{status_code, request_id, body}|null,
// error:{code,message}|null}). Input is read line by line and output appended to a file as each
// request finishes, so memory holds only the requests in flight, whatever the batch size.
//
// - A request takes a slot of the limiter (concurrency.ts) while it is at the engine; a line waiting
//   to retry gives its slot back and, to retry, takes the next free one before any new line does.
//   The limiter is shared by every job of the daemon, so at most its limit of
//   requests are in flight whatever the number of jobs. Every answer (and timeout) is a sample
//   the limiter learns the engine's capacity from (--concurrency auto).
// - 429, 5xx, connection errors and timeouts are retried with the daemon's one retry policy
//   (backoff.ts: full-jitter backoff, Retry-After honoured up to its cap) up to `tries` attempts;
//   a connection reset before any answer is sent again at once on a new connection, once per try.
// - A request that still fails becomes an output line carrying its error; the job goes on.
// - A request that ends in a connection error makes the executor check whether the runtime is still
//   reachable; if not, the job stops with RuntimeUnavailableError (the agent reports the failure so
//   the batch is requeued instead of being completed with every remaining line failed).

export interface JobRequestSpec {
  /** The runtime's model string (catalogue runtime_model_id); replaces every line's body.model. */
  model: string
  /** The batch endpoint, e.g. /v1/chat/completions; sent to the runtime at runtimeUrl + endpoint. */
  endpoint: string
}

export interface Counts {
  /** Lines read so far. */
  read: number
  completed: number
  failed: number
}

export interface ExecutorOptions {
  runtimeUrl: string
  /** The daemon's shared limiter; without one, a limiter of `concurrency` for this job alone. */
  limiter?: RequestLimiter
  concurrency?: number
  tries: number
  requestTimeoutMs: number
  backoff: Backoff
  signal?: AbortSignal
  onLine?: (counts: Counts) => void
  /** Every line's request has started (only requests in flight remain). */
  onAllStarted?: () => void
  /** The waits between retries (default: real time). */
  timers?: Timers
  /**
   * Asked after a request failed — `connection` (no answer: refused, broken, timed out) or
   * `answer` (an error status): why the job cannot go on (its engine or model is gone), or null.
   * Default: after a connection failure, whether `runtimeUrl` answers at all.
   */
  engineCheck?: (failure: 'connection' | 'answer') => Promise<Error | null>
}

export class RuntimeUnavailableError extends Error {}

const DEFAULT_ENDPOINT = '/v1/chat/completions'
const FLUSH_BYTES = 64 * 1024
const MAX_ERROR_TEXT = 2000
const RECHECK_MS = 1000

interface Outcome {
  status?: number
  requestId?: string | null
  text?: string
  error?: { code: string; message: string }
}

/** Streams the input (a file path, or a byte stream) through the runtime into `outputPath`. */
export async function executeJob(
  input: string | ReadableStream<Uint8Array>,
  outputPath: string,
  job: JobRequestSpec,
  opts: ExecutorOptions,
): Promise<Counts> {
  const counts: Counts = { read: 0, completed: 0, failed: 0 }
  const url = opts.runtimeUrl + (job.endpoint || DEFAULT_ENDPOINT)
  const ids = sequence('batch_req_')
  const requestIds = sequence('req_')
  // Stops every request of this job: the caller's abort, or the runtime found gone.
  const stop = new AbortController()
  const onOuterAbort = () => stop.abort(opts.signal!.reason)
  if (opts.signal?.aborted) throw opts.signal.reason
  opts.signal?.addEventListener('abort', onOuterAbort, { once: true })
  let fatal: unknown
  const timers = opts.timers ?? realTimers
  const limiter = opts.limiter ?? fixedLimiter(opts.concurrency ?? 8)
  const engineCheck =
    opts.engineCheck ??
    (async (failure: 'connection' | 'answer') =>
      failure === 'connection' && !(await runtimeReachable(opts.runtimeUrl))
        ? new RuntimeUnavailableError(`runtime unreachable at ${opts.runtimeUrl}`)
        : null)
  // One check answers the failures of the same moment; a later failure checks again (a runtime may
  // restart while a job waits).
  const checks: Partial<Record<'connection' | 'answer', { at: number; why: Promise<Error | null> }>> = {}
  const engineGone = (failure: 'connection' | 'answer') => {
    const last = checks[failure]
    if (!last || timers.nowMs() - last.at > RECHECK_MS)
      checks[failure] = { at: timers.nowMs(), why: engineCheck(failure) }
    return checks[failure]!.why
  }

  // The sink writes its buffer out whenever it passes FLUSH_BYTES: results reach the disk as the
  // job goes, and memory holds at most one buffer of them.
  writeFileSync(outputPath, '') // a FileSink does not truncate what is already there
  const writer = Bun.file(outputPath).writer({ highWaterMark: FLUSH_BYTES })
  // Counted from the record written, so counts always agree with what the server will count
  // (docs/api.md §7: status_code < 400 and no error → output file; everything else → error file).
  const write = ({ line, ok }: Written) => {
    writer.write(line)
    if (ok) counts.completed++
    else counts.failed++
    opts.onLine?.(counts)
  }

  const runLine = async (raw: string, permit: Permit) => {
    let parsed: any
    try {
      parsed = JSON.parse(raw)
    } catch {
      // Validation guarantees JSON lines; without a custom_id nothing can be reported for this one.
      return
    }
    const customId = parsed?.custom_id
    if (typeof customId !== 'string') return
    const body = parsed.body
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      write(errorLine(ids(), customId, 'invalid_request', 'body is not a JSON object'))
      return
    }
    body.model = job.model
    // A batch result is one response body; a streamed answer would arrive as server-sent events.
    if ('stream' in body) body.stream = false
    const outcome = await request(url, JSON.stringify(body), opts, timers, permit, stop.signal)
    const failure =
      outcome.error?.code === 'connection_error' || outcome.error?.code === 'timeout'
        ? 'connection'
        : (outcome.status ?? 0) >= 400
          ? 'answer'
          : null
    if (failure && !stop.signal.aborted) {
      const gone = await engineGone(failure)
      if (gone) {
        if (gone instanceof RuntimeUnavailableError && outcome.error)
          throw new RuntimeUnavailableError(`${gone.message}: ${outcome.error.message}`)
        throw gone
      }
    }
    if (stop.signal.aborted) return
    write(outputLine(ids(), customId, outcome, requestIds))
  }

  // This job's lines in flight; the end waits for the last of them.
  let active = 0
  let drained: (() => void) | null = null
  const done = (permit: Permit) => {
    permit.release()
    if (--active === 0) drained?.()
  }

  try {
    const source = typeof input === 'string' ? Bun.file(input).stream() : input
    let ended = true
    for await (const [, line] of readLines(source, MAX_INPUT_LINE_BYTES)) {
      if (stop.signal.aborted) break
      if (!line.trim()) continue
      if (!(await limiter.acquire(stop.signal))) {
        ended = false
        break
      }
      counts.read++
      active++
      const permit = new Permit(limiter)
      runLine(line, permit)
        .catch((e) => {
          if (!stop.signal.aborted) {
            fatal = e
            stop.abort(e)
          }
        })
        .finally(() => done(permit))
    }
    if (ended && !stop.signal.aborted) opts.onAllStarted?.()
    if (active > 0) await new Promise<void>((r) => (drained = r))
  } finally {
    opts.signal?.removeEventListener('abort', onOuterAbort)
    await writer.end()
  }
  if (fatal) throw fatal
  if (opts.signal?.aborted) throw opts.signal.reason
  return counts
}

/** One request with retries. Never throws: a final failure is an Outcome with an error. */
async function request(
  url: string,
  payload: string,
  opts: ExecutorOptions,
  timers: Timers,
  permit: Permit,
  stop: AbortSignal,
): Promise<Outcome> {
  let last: Outcome = { error: { code: 'connection_error', message: 'not attempted' } }
  // Once per try, a connection the engine reset before answering (ECONNRESET: a kept-alive
  // connection it had closed as this request went out on it — llama.cpp's router does) is not a
  // try: the request goes again at once, on a new connection.
  let fresh = false
  for (let attempt = 0; attempt < opts.tries; attempt++) {
    if (stop.aborted) return last
    let hintMs: number | null = null
    let reset = false
    const ac = new AbortController()
    const onStop = () => ac.abort()
    stop.addEventListener('abort', onStop, { once: true })
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      ac.abort()
    }, opts.requestTimeoutMs)
    const startedAtMs = timers.nowMs()
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: payload,
        signal: ac.signal,
        ...(fresh ? { keepalive: false } : {}),
      })
      fresh = false
      const text = await res.text()
      // 429 and 503 are how engines say they are over their capacity.
      permit.limiter.sample({ startedAtMs, overload: res.status === 429 || res.status === 503 })
      last = { status: res.status, requestId: res.headers.get('x-request-id'), text }
      if (res.status !== 429 && res.status < 500) return last
      hintMs = retryAfterMs(res.headers.get('retry-after'))
    } catch (e) {
      if (stop.aborted) return last
      reset = !timedOut && !fresh && (e as NodeJS.ErrnoException).code === 'ECONNRESET'
      fresh = reset
      if (timedOut) permit.limiter.sample({ startedAtMs, overload: true })
      last = timedOut
        ? { error: { code: 'timeout', message: `no answer within ${opts.requestTimeoutMs} ms` } }
        : { error: { code: 'connection_error', message: (e as Error).message || String(e) } }
    } finally {
      clearTimeout(timer)
      stop.removeEventListener('abort', onStop)
    }
    if (reset) {
      attempt--
      continue
    }
    if (attempt + 1 < opts.tries) {
      // The wait is not a request at the engine: its slot serves another meanwhile.
      permit.release()
      await timers.sleep(retryDelay(attempt, opts.backoff, hintMs), stop)
      if (!(await permit.retake(stop))) return last
    }
  }
  return last
}

/** A line's slot of the limiter, given back while it waits to retry. */
class Permit {
  private held = true
  constructor(readonly limiter: RequestLimiter) {}
  release() {
    if (!this.held) return
    this.held = false
    this.limiter.release()
  }
  async retake(signal: AbortSignal) {
    this.held = await this.limiter.acquire(signal, { retry: true })
    return this.held
  }
}

interface Written {
  line: string
  /** Goes to the output file (a success), not the error file. */
  ok: boolean
}

function outputLine(id: string, customId: string, o: Outcome, requestIds: () => string): Written {
  if (o.error) return errorLine(id, customId, o.error.code, o.error.message)
  const text = o.text ?? ''
  let body: string
  try {
    const value = JSON.parse(text)
    // Reuse the runtime's bytes unless they span lines (JSONL needs one line per record) or the
    // usage gains the cached prompt tokens an older llama-server reports only in its timings.
    const rewrite = text.includes('\n') || text.includes('\r') || text.length === 0
    body = reportCachedTokens(value) || rewrite ? JSON.stringify(value) : text
  } catch {
    if ((o.status ?? 0) < 400)
      return errorLine(id, customId, 'invalid_response', 'runtime answered with invalid JSON')
    body = JSON.stringify({ error: { message: text.slice(0, MAX_ERROR_TEXT) } })
  }
  const status = o.status ?? 500
  return {
    line:
      `{"id":${JSON.stringify(id)},"custom_id":${JSON.stringify(customId)},` +
      `"response":{"status_code":${status},"request_id":${JSON.stringify(o.requestId || requestIds())},` +
      `"body":${body}},"error":null}\n`,
    ok: status < 400,
  }
}

function errorLine(id: string, customId: string, code: string, message: string): Written {
  const error = { code, message: message.slice(0, MAX_ERROR_TEXT) }
  return { line: `${JSON.stringify({ id, custom_id: customId, response: null, error })}\n`, ok: false }
}

/** Unique ids without a CSPRNG call per line: a random prefix and a counter. */
function sequence(prefix: string): () => string {
  const base = prefix + randomBase62(12) + '_'
  let n = 0
  return () => base + (++n).toString(36)
}

/** Any HTTP answer means the runtime is up; only a failed connection means it is gone. */
export async function runtimeReachable(baseUrl: string): Promise<boolean> {
  try {
    const res = await fetch(baseUrl + '/', { signal: AbortSignal.timeout(5000) })
    await res.arrayBuffer()
    return true
  } catch {
    return false
  }
}
