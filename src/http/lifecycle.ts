import type { HigherOrderFunction } from 'elysia/types'
import type { Deps } from '../deps'
import { TrustedProxies } from '../lib/client-address'
import { log, logEnabled } from '../lib/logger'
import { readCredential } from './auth'
import { beginRequest, pathOf, type RequestFacts } from './context'
import type { CredentialState } from './credential-cache'
import { errorResponse } from './errors'
import { checkBodyHeaders } from './parse'

// Every request's life around Elysia's handling of it. Installed with `wrap`, it runs for the
// routes Bun dispatches natively, for the others and for unmatched paths alike:
//   1. its facts: the request id and the time it arrived;
//   2. the checks made on headers alone, before a byte of the body is read (the URL is checked
//      where a route reads it: src/app.ts);
//   3. its credential (src/http/auth.ts readCredential), awaited here if it must be looked up, so
//      that no route awaits it;
//   4. with the response in hand: its X-Request-Id (and Strict-Transport-Security when the server
//      speaks HTTPS itself, docs/deployment.md "TLS on the binary"), its log line and its metrics.
// Elysia's own request and after-response hooks would do the same at a higher price: an
// after-response hook makes every route compile into an async handler, and a promise handed to
// Bun costs a served request more than the rest of a cached answer does.

type Handle = (request: Request) => Response | Promise<Response>

/** docs/deployment.md "TLS on the binary": browsers keep to https:// for a year. */
export const HSTS = 'max-age=31536000'

/**
 * Requests begun and not yet answered on this server, logged and counted; the shutdown waits for
 * this to reach 0, so every request is logged.
 */
export interface RequestCount {
  requestsOpen: number
}

export function lifecycle(deps: Deps & RequestCount & CredentialState): HigherOrderFunction {
  // Checked by loadConfig already; parsed once per app, not per request.
  const proxies = TrustedProxies.parse(deps.config.TRUSTED_PROXIES)
  // Elysia calls this with its handler for every request, and calls what it returns.
  return (fn) => {
    const next = fn as unknown as Handle
    return (request: Request) => {
      const facts = beginRequest(request, deps.clock.monotonicMs(), proxies)
      deps.requestsOpen++
      try {
        checkBodyHeaders(request)
      } catch (error) {
        return recorded(deps, request, facts, errorResponse(error, errorCode(error), request))
      }
      const reading = readCredential(deps, request, facts)
      if (reading) return reading.then(() => respond(deps, next, request, facts))
      return respond(deps, next, request, facts)
    }
  }
}

function respond(
  deps: Deps & RequestCount & CredentialState,
  next: Handle,
  request: Request,
  facts: RequestFacts,
) {
  let response: Response | Promise<Response>
  try {
    response = next(request)
  } catch (error) {
    response = errorResponse(error, errorCode(error), request)
  }
  if (!(response instanceof Promise)) return recorded(deps, request, facts, response)
  // A route Elysia compiled as synchronous may still answer with a promise (an answer not at
  // hand); if that fails, Elysia's error hook never sees it, so it is answered here, in the same
  // envelope.
  return response.then(
    (r) => recorded(deps, request, facts, r),
    (error) => recorded(deps, request, facts, errorResponse(error, errorCode(error), request)),
  )
}

const errorCode = (error: unknown) => (error as { code?: string | number } | null)?.code ?? 'UNKNOWN'

/**
 * Every request is logged and counted exactly once, here, when its response is ready: errors and
 * unmatched paths included (docs/operations.md "Logs" and "Metrics"). The status is the response's own. The log carries the path
 * without its query string (a query may carry a token); metrics carry only the route pattern
 * (bounded label cardinality).
 */
function recorded(
  deps: Deps & RequestCount & CredentialState,
  request: Request,
  facts: RequestFacts,
  response: Response,
): Response {
  deps.requestsOpen--
  if (!facts.idSent) response.headers.set('x-request-id', facts.id)
  if (deps.config.TLS_CERT_FILE) response.headers.set('strict-transport-security', HSTS)
  const seconds = (deps.clock.monotonicMs() - facts.startedMs) / 1000
  const status = response.status
  deps.metrics.http.record(request.method, facts.route ?? 'unmatched', status, seconds)
  if (logEnabled('info'))
    log.info('request', {
      request_id: facts.id,
      method: request.method,
      route: facts.route ?? null,
      path: pathOf(request.url),
      status,
      duration_ms: Math.round(seconds * 100_000) / 100,
    })
  return response
}
