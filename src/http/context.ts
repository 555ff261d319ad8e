import type { Principal } from '../modules/auth/credentials'

// Per-request facts, from the request's arrival (src/http/lifecycle.ts) to its recording, keyed by
// the Request so nothing leaks between requests and nothing needs cleaning up.
export interface RequestFacts {
  id: string
  /** deps.clock.monotonicMs() when the request arrived. */
  startedMs: number
  /** The route pattern, once routing found one (unmatched requests never get one). */
  route?: string
  /** Who the Authorization header names, resolved before routing: a principal, or why not. */
  credential: Principal | { failed: unknown }
  /** The credential as the route's auth level admits it (src/http/auth.ts). */
  principal?: Principal
}
const facts = new WeakMap<Request, RequestFacts>()

const CLIENT_ID = /^[\w.:-]{1,128}$/

/** Echoes a well-formed client X-Request-Id, else makes one (random, not a secret: a UUID is
 * the cheapest good source, and every request pays for it). */
export function beginRequest(request: Request, startedMs: number): RequestFacts {
  const given = request.headers.get('x-request-id')
  const f: RequestFacts = {
    id: given && CLIENT_ID.test(given) ? given : `req_${crypto.randomUUID().replaceAll('-', '')}`,
    startedMs,
    credential: ANONYMOUS,
  }
  facts.set(request, f)
  return f
}

export const requestFacts = (request: Request): RequestFacts | undefined => facts.get(request)

const ANONYMOUS: Principal = { kind: 'anonymous' }

/** The path of a request URL without its query string (which may carry a token). */
export function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const query = url.indexOf('?', start)
  return url.slice(start, query < 0 ? undefined : query)
}
