// The one client of the public JSON API (docs/api.md §11). The JWT from login is the bearer; it lives
// in memory and sessionStorage (survives a reload, not the tab), never localStorage.
//
// Calls are typed from the server's routes by Eden Treaty (`client.v1.files.get(…)`): the app's type
// is imported type-only from src/app.ts, so nothing of the server reaches the bundle, and a renamed
// path, body field or response field fails `bun run typecheck`.

import { treaty } from '@elysiajs/eden'
import type { App } from '../../src/app'
import type { PoolCapacity } from './types'

const TOKEN_KEY = 'gridkeep.token'

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message)
  }
}

/** A request that never reached the server (it went away, or the network did). */
export const OFFLINE_MESSAGE = 'The server cannot be reached. Check that it is running, then try again.'

type Listener = () => void
const listeners = new Set<Listener>()
let token: string | null = sessionStorage.getItem(TOKEN_KEY)
/** Why the last session ended, shown on the sign-in page once. */
let endedBecause: string | null = null

export const session = {
  get token() {
    return token
  },
  signIn(t: string) {
    token = t
    endedBecause = null
    sessionStorage.setItem(TOKEN_KEY, t)
    emit()
  },
  signOut(reason: string | null = null) {
    token = null
    endedBecause = reason
    sessionStorage.removeItem(TOKEN_KEY)
    emit()
  },
  takeEndReason(): string | null {
    const r = endedBecause
    endedBecause = null
    return r
  },
  subscribe(l: Listener) {
    listeners.add(l)
    return () => void listeners.delete(l)
  },
}
const emit = () => {
  for (const l of listeners) l()
}

export interface RequestOptions {
  body?: unknown
  form?: FormData
  signal?: AbortSignal
  /** Do not end the session on a 401 (sign-in's own wrong-password answer). */
  anonymous?: boolean
}

/** Sends a request; resolves with the response on 2xx, throws ApiError otherwise. */
export function send(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
  let body: BodyInit | undefined
  const headers: Record<string, string> = {}
  if (o.form) body = o.form
  else if (o.body !== undefined) {
    headers['content-type'] = 'application/json'
    body = JSON.stringify(o.body)
  }
  return request(path, { method, headers, body, signal: o.signal }, o.anonymous)
}

/** The one fetch of the dashboard: adds the bearer, and turns a failure into an ApiError. */
async function request(url: string, init: RequestInit, anonymous = false): Promise<Response> {
  const headers = new Headers(init.headers)
  if (token && !anonymous) headers.set('authorization', `Bearer ${token}`)
  let res: Response
  try {
    res = await fetch(url, { ...init, headers })
  } catch (error) {
    if (init.signal?.aborted) throw error
    throw new ApiError(0, 'offline', OFFLINE_MESSAGE)
  }
  if (res.ok) return res
  const error = await toError(res)
  // docs/api.md §1: an expired, revoked or otherwise dead credential is a 401; the session is over.
  if (res.status === 401 && token && !anonymous) session.signOut('Your session has ended. Sign in again.')
  throw error
}

async function toError(res: Response): Promise<ApiError> {
  try {
    const { error } = (await res.json()) as {
      error: { message: string; code: string | null; param: string | null }
    }
    return new ApiError(res.status, error.code, error.message, error.param)
  } catch {
    return new ApiError(res.status, null, `The server answered ${res.status} ${res.statusText}`.trim())
  }
}

// Dates stay strings (the API's times are numbers; a name that looks like a date is still a name).
const options = (anonymous: boolean) => ({
  parseDate: false,
  fetcher: ((input: RequestInfo | URL, init?: RequestInit) =>
    request(String(input), init ?? {}, anonymous)) as typeof fetch,
})
const origin = typeof location === 'undefined' ? 'http://localhost' : location.origin
/** The API, typed from the server's routes. Each call resolves to Eden's `{ data, error }`; see `ok`. */
export const client = treaty<App>(origin, options(false))
/** The same, without the bearer and without ending the session on a 401 (sign-in, sign-up, …). */
export const anonymousClient = treaty<App>(origin, options(true))

/**
 * The answer of a `client` call on 2xx; otherwise throws the ApiError `request` made (a 4xx/5xx
 * envelope, or offline), or the abort.
 */
export async function ok<R extends { data: unknown; error: unknown }>(
  call: Promise<R>,
): Promise<NonNullable<R['data']>> {
  const answer = await call
  if (answer.error) {
    const value = (answer.error as { value?: unknown }).value
    throw value instanceof Error ? value : new ApiError(0, null, 'Something went wrong. Try again.')
  }
  return answer.data as NonNullable<R['data']>
}

/**
 * The capacity route answers a pre-serialized JSON Response (kept as text between requests), so its
 * type says `Response` while Eden hands over the parsed body: the service's own `PoolCapacity`.
 */
export const poolCapacity = async (anonymous: boolean, signal: AbortSignal): Promise<PoolCapacity> =>
  (await ok(
    (anonymous ? anonymousClient : client).v1.pool.capacity.get({ fetch: { signal } }),
  )) as unknown as PoolCapacity

/** Words for an error, whatever threw it. */
export const messageOf = (error: unknown): string =>
  error instanceof Error ? error.message : 'Something went wrong. Try again.'

/** Downloads an API file (bearer required, so no plain link) under `name`. */
export async function download(path: string, name: string): Promise<void> {
  saveFile(name, await (await send('GET', path)).blob())
}

/** Hands `blob` to the browser as a download named `name`. */
export function saveFile(name: string, blob: Blob): void {
  const url = URL.createObjectURL(blob)
  const a = document.createElement('a')
  a.href = url
  a.download = name
  document.body.append(a)
  a.click()
  a.remove()
  setTimeout(() => URL.revokeObjectURL(url), 10_000)
}
