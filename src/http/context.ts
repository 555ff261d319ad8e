import { type AuditContext, actorOf } from '../domain/audit'
import { ANONYMOUS, type Principal } from '../domain/principal'
import { TrustedProxies } from '../lib/client-address'

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
  /** The response was built carrying X-Request-Id (withRequestId); the lifecycle adds it to others. */
  idSent?: true
  /** The server's TRUSTED_PROXIES, which decide what clientAddress reads. */
  proxies: TrustedProxies
  /** clientAddress's answer, once asked. */
  client?: string | null
}
const facts = new WeakMap<Request, RequestFacts>()

const CLIENT_ID = /^[\w.:-]{1,128}$/

// Made ids: unique, not secret. A random prefix for this process (instances share logs and a
// database) and a counter: every request pays for its id, and a UUID per request cost more.
const ID_PREFIX = `req_${crypto.randomUUID().replaceAll('-', '').slice(0, 16)}`
let made = 0

/** Echoes a well-formed client X-Request-Id, else makes one. */
export function beginRequest(request: Request, startedMs: number, proxies: TrustedProxies): RequestFacts {
  const given = request.headers.get('x-request-id')
  const f: RequestFacts = {
    id: given && CLIENT_ID.test(given) ? given : ID_PREFIX + (made++).toString(36),
    startedMs,
    credential: ANONYMOUS,
    proxies,
  }
  facts.set(request, f)
  return f
}

export const requestFacts = (request: Request): RequestFacts | undefined => facts.get(request)

/** The facts of a request inside a route's hooks, where the lifecycle has always made them. */
export function factsOf(request: Request): RequestFacts {
  const f = facts.get(request)
  if (!f) throw new Error('a request reached a route without its facts (src/http/lifecycle.ts)')
  return f
}

/**
 * The headers of a response a route builds whole, with the request's X-Request-Id: given at
 * construction, it costs less than the lifecycle's adding it afterwards.
 */
export function withRequestId(request: Request, headers: Record<string, string>): Record<string, string> {
  const f = facts.get(request)
  if (!f) return headers
  f.idSent = true
  return { ...headers, 'x-request-id': f.id }
}

/** The path of a request URL without its query string (which may carry a token). */
export function pathOf(url: string): string {
  const start = url.indexOf('/', url.indexOf('//') + 2)
  if (start < 0) return '/'
  const query = url.indexOf('?', start)
  return url.slice(start, query < 0 ? undefined : query)
}

/** What a request's client address reads of Elysia's server: the peer's address. */
export interface PeerAddress {
  requestIP(request: Request): { address: string } | null
}

/**
 * The one answer to "which address is this request from" (docs/deployment.md "The client's address
 * behind a proxy"), for the audit entry, the login rate limit and anything else that names the
 * client: the connection's peer, or, when the peer is one of TRUSTED_PROXIES, the rightmost
 * X-Forwarded-For address that is not (src/lib/client-address.ts). Null without a socket
 * (app.handle in tests).
 */
export function clientAddress(request: Request, server: PeerAddress | null): string | null {
  const f = facts.get(request)
  if (f?.client !== undefined) return f.client
  const peer = server?.requestIP(request)?.address ?? null
  const proxies = f?.proxies ?? TrustedProxies.none
  const client = proxies.clientAddress(peer, request.headers.get('x-forwarded-for'))
  if (f) f.client = client
  return client
}

const USER_AGENT_CHARS = 512

/**
 * Who makes a change and from where, for its audit entry (docs/api.md §17): the principal the
 * route's auth level admitted, the client's address (clientAddress), and the User-Agent, cut to
 * 512 characters. Routes that change something pass it to their service, as they pass the principal.
 */
export function auditContext(request: Request, server: PeerAddress | null): AuditContext {
  const agent = request.headers.get('user-agent')
  return {
    actor: actorOf(facts.get(request)?.principal ?? ANONYMOUS),
    ip: clientAddress(request, server),
    user_agent: agent === null ? null : agent.slice(0, USER_AGENT_CHARS),
  }
}
