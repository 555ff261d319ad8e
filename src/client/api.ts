import pkg from '../../package.json'
import type { BATCH_STATUSES, StateTimes } from '../domain/batch-states'
import type { ShardTally } from '../domain/shards'
import type { RequestCounts, ValidationErrorEvent } from '../lib/batch-events'
import { cleartextWarning, sendsInClear, trusting } from '../lib/tls-client'
import { ClientError, EXIT, exitCodeOfStatus } from './exit'

// The client's side of the public API (docs/api.md §0–§6): every call carries the personal key (or,
// during login, the JWT) as a bearer token, and every failure becomes a ClientError with its exit
// code. The client is its own root (test/store/layers.test.ts): it reaches only src/lib and
// src/domain, so the shapes it reads are written here, as docs/api.md states them, and the
// end-to-end tests hold them to the real server.

export const CLIENT_VERSION = pkg.version

export type BatchStatus = (typeof BATCH_STATUSES)[number]

/** docs/api.md §6: the batch object, the fields the client reads. */
export interface Batch extends StateTimes {
  id: string
  endpoint: string
  model: string | null
  input_file_id: string
  status: BatchStatus
  output_file_id: string | null
  error_file_id: string | null
  attempts: number
  error: string | null
  errors: { total: number; data: ValidationErrorEvent[] }
  request_counts: RequestCounts
  /** docs/api.md §6: a completed batch's tokens (OpenAI's shape); null before; absent from an older server. */
  usage?: {
    input_tokens: number
    input_tokens_details: { cached_tokens: number }
    output_tokens: number
  } | null
  metadata: Record<string, string> | null
  /** docs/api.md §16: null for a batch that runs whole. */
  shards: ShardTally | null
  /** docs/api.md §6 "Why a batch waits": null unless validated; absent from an older server. */
  waiting?: { reason: string; message: string } | null
}

/** docs/api.md §5 */
export interface FileObject {
  id: string
  bytes: number
  created_at: number
  filename: string
  purpose: string
  expires_at?: number | null
}

/** docs/api.md §4 */
export interface Model {
  id: string
  display_name: string
  task_type: string
  quantization: string | null
  parameter_size: string | null
  context_length: number | null
  vram_gb: number | null
  available: boolean
}

/** docs/api.md §17: an audit log entry, the fields the client reads. */
export interface AuditEvent {
  id: string
  created_at: number
  action: string
  actor: { kind: string; id: string | null; user_id: string | null }
  ip: string | null
  target: { kind: string; id: string | null }
  org_id: string | null
  details: Record<string, unknown>
}

/** docs/api.md §0 */
export interface List<T> {
  data: T[]
  has_more?: boolean
  last_id?: string | null
}

/** docs/api.md §2 */
export interface LoginAnswer {
  access_token: string
  must_change_password: boolean
  user: { email: string }
}

/** docs/api.md §3 */
export interface KeyRecord {
  id: string
  name: string
  prefix: string
  key?: string
}

const CALL_TIMEOUT_MS = 30_000

/**
 * docs/guide.md "The terminal client": a refused connection is tried once more after this long.
 * The server refuses one for an instant when a renewed certificate replaces its listener
 * (docs/deployment.md "TLS on the binary"); a server that is down is reported 0.25 s later.
 */
export const REFUSED_RETRY_MS = 250

/** Whether fetch failed because nothing accepted the connection: the request reached no server. */
const refused = (e: unknown) => {
  const code = (e as { code?: string } | null)?.code
  return code === 'ECONNREFUSED' || code === 'ConnectionRefused'
}

/** The answer was not 2xx: its status and the §0 envelope's code and message. */
export class ApiFailure extends ClientError {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
    readonly retryAfter: string | null,
  ) {
    super(exitCodeOfStatus(status), message, { status, code })
  }
}

/** Ctrl-C: whatever was under way stops; a batch already created keeps running. */
export class Interrupted extends Error {
  constructor() {
    super('interrupted')
  }
}

export interface CallOptions {
  body?: unknown
  /** A raw body (the upload's stream) with its headers. */
  raw?: { body: ReadableStream<Uint8Array>; headers: Record<string, string> }
  /** No overall time limit (uploads, downloads, the event stream). */
  untimed?: boolean
  /** A bearer other than the client's key (the JWT during login). */
  token?: string
}

/** How the client reaches the server (docs/guide.md "The terminal client", --ca-file). */
export interface Transport {
  /** --ca-file / GRIDKEEP_CA_FILE: a CA's PEM trusted beside Bun's own. */
  ca?: string
  /** Said once per command when a credential would go out in clear text. */
  warn?: (text: string) => void
  /** Hears a refused connection about to be tried again (tests; the command itself says nothing). */
  retrying?: (method: string, path: string) => void
}

export class Api {
  private readonly tls: ReturnType<typeof trusting>

  constructor(
    readonly server: string,
    private readonly token: string | null,
    /** Aborted by Ctrl-C. */
    readonly interrupt: AbortSignal,
    private readonly transport: Transport = {},
  ) {
    this.tls = trusting(transport.ca)
  }

  /** A 2xx response (its body unread), or a ClientError. */
  async send(method: string, path: string, o: CallOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { 'user-agent': `gridkeep-cli/${CLIENT_VERSION}` }
    const token = o.token ?? this.token
    if (token) headers.authorization = `Bearer ${token}`
    let body: string | ReadableStream<Uint8Array> | undefined
    if (o.raw) {
      Object.assign(headers, o.raw.headers)
      body = o.raw.body
    } else if (o.body !== undefined) {
      headers['content-type'] = 'application/json'
      body = JSON.stringify(o.body)
    }
    const signal = o.untimed
      ? this.interrupt
      : AbortSignal.any([this.interrupt, AbortSignal.timeout(CALL_TIMEOUT_MS)])
    // docs/deployment.md "TLS on the binary": every call carries a key, a token or (login) a password.
    if (sendsInClear(this.server))
      this.transport.warn?.(cleartextWarning('your key or password', this.server))
    let res: Response
    for (let attempt = 0; ; attempt++) {
      try {
        res = await fetch(this.server + path, {
          method,
          headers,
          body,
          signal,
          duplex: 'half',
          ...this.tls,
        } as RequestInit)
        break
      } catch (e) {
        // A refused connection delivered nothing, so sending the request again cannot make it
        // happen twice, whatever its method; a streamed body (an upload) cannot be read twice.
        if (attempt > 0 || !refused(e) || o.raw || signal.aborted) throw this.transportFailure(e)
        this.transport.retrying?.(method, path)
        await pause(REFUSED_RETRY_MS, this.interrupt)
      }
    }
    if (res.ok) return res
    const text = await res.text().catch(() => '')
    let code: string | null = null
    let message = text.trim().slice(0, 300) || res.statusText
    try {
      const envelope = JSON.parse(text) as { error?: { code?: string | null; message?: string } }
      code = envelope.error?.code ?? null
      message = envelope.error?.message ?? message
    } catch {}
    throw new ApiFailure(
      res.status,
      code,
      `${message} (HTTP ${res.status}${code ? ` ${code}` : ''})`,
      res.headers.get('retry-after'),
    )
  }

  async json<T>(method: string, path: string, o: CallOptions = {}): Promise<T> {
    const res = await this.send(method, path, o)
    let text: string
    try {
      text = await res.text()
    } catch (e) {
      throw this.transportFailure(e)
    }
    try {
      return JSON.parse(text) as T
    } catch {
      throw new ClientError(
        EXIT.server,
        `${method} ${path}: the answer is not JSON; is ${this.server} a gridkeep server?`,
      )
    }
  }

  /** What a failed fetch means: Ctrl-C, or a server that cannot be reached. */
  transportFailure(e: unknown): Error {
    if (this.interrupt.aborted) return new Interrupted()
    if (e instanceof ClientError) return e
    const name = (e as Error)?.name
    const why =
      name === 'TimeoutError' ? `no answer within ${CALL_TIMEOUT_MS / 1000} s` : (e as Error)?.message
    return new ClientError(EXIT.unreachable, `cannot reach ${this.server}: ${why}`, { server: this.server })
  }
}

/** Resolves after `ms`, or rejects with Interrupted at Ctrl-C. */
export function pause(ms: number, interrupt: AbortSignal): Promise<void> {
  if (interrupt.aborted) return Promise.reject(new Interrupted())
  return new Promise((resolve, reject) => {
    const done = () => {
      clearTimeout(timer)
      interrupt.removeEventListener('abort', stop)
    }
    const stop = () => {
      done()
      reject(new Interrupted())
    }
    const timer = setTimeout(() => {
      done()
      resolve()
    }, ms)
    interrupt.addEventListener('abort', stop, { once: true })
  })
}
