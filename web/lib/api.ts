// The one client of the public JSON API (docs/api.md §11). The JWT from login is the bearer; it lives
// in memory and sessionStorage (survives a reload, not the tab), never localStorage.

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
export async function send(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = {}
  if (token && !o.anonymous) headers.authorization = `Bearer ${token}`
  let body: BodyInit | undefined
  if (o.form) body = o.form
  else if (o.body !== undefined) {
    headers['content-type'] = 'application/json'
    body = JSON.stringify(o.body)
  }
  let res: Response
  try {
    res = await fetch(path, { method, headers, body, signal: o.signal })
  } catch (error) {
    if (o.signal?.aborted) throw error
    throw new ApiError(0, 'offline', OFFLINE_MESSAGE)
  }
  if (res.ok) return res
  const error = await toError(res)
  // docs/api.md §1: an expired, revoked or otherwise dead credential is a 401; the session is over.
  if (res.status === 401 && token && !o.anonymous) session.signOut('Your session has ended. Sign in again.')
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

export const api = {
  get: async <T>(path: string, o?: RequestOptions): Promise<T> => (await send('GET', path, o)).json(),
  post: async <T>(path: string, body?: unknown, o?: RequestOptions): Promise<T> =>
    (await send('POST', path, { ...o, body })).json(),
  put: async <T>(path: string, body?: unknown): Promise<T> => (await send('PUT', path, { body })).json(),
  patch: async <T>(path: string, body?: unknown): Promise<T> => (await send('PATCH', path, { body })).json(),
  delete: async <T>(path: string): Promise<T> => (await send('DELETE', path)).json(),
}

/** Words for an error, whatever threw it. */
export const messageOf = (error: unknown): string =>
  error instanceof Error ? error.message : 'Something went wrong. Try again.'

/** A query string from the defined values. */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params))
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v))
  const s = q.toString()
  return s ? `?${s}` : ''
}

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
