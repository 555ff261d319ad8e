import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { withRequestId } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import type { PoolState } from './service'
import { poolCapacity } from './service'

export const poolRoutes = (deps: Deps & CredentialState & PoolState) => {
  const headers = {
    'content-type': 'application/json',
    'cache-control': `max-age=${deps.config.POOL_CACHE_SECONDS}`,
  }
  // Kept serialized (service.ts): written out as it is, not re-encoded.
  const answer = (request: Request) => (body: string) =>
    new Response(body, { headers: withRequestId(request, headers) })
  return new Elysia({ name: 'routes.pool', prefix: '/v1/pool' }).use(authPlugin(deps)).get(
    '/capacity',
    // A cached answer is sent without a promise. Written so that Elysia's compiler sees a
    // synchronous handler: it takes one whose text returns a call (`return f(`, `=> f(`) for async,
    // and compiles its route into an async handler. A miss answers with a promise, whose failure
    // the request lifecycle answers (src/http/lifecycle.ts). test/pool/capacity.test.ts checks both.
    ({ principal, request }) => {
      const body = poolCapacity(deps, principal)
      return typeof body === 'string' ? answer(request)(body) : body.then(answer(request))
    },
    {
      optional: true,
      detail: {
        tags: ['pool'],
        summary:
          'Aggregate pool capacity; anonymous callers get a reduced view. Poll no faster than every 30 s.',
      },
    },
  )
}
