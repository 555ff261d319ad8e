import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { sendAsIs } from '../../http/context'
import { poolCapacity } from './service'

export const poolRoutes = (deps: Deps) =>
  new Elysia({ name: 'routes.pool', prefix: '/v1/pool' }).use(authPlugin(deps)).get(
    '/capacity',
    async ({ principal, set }) =>
      // Kept serialized (service.ts): written out as it is, not re-encoded.
      sendAsIs(set, await poolCapacity(deps, principal), {
        'content-type': 'application/json',
        'cache-control': `max-age=${deps.config.POOL_CACHE_SECONDS}`,
      }),
    {
      optional: true,
      detail: {
        tags: ['pool'],
        summary:
          'Aggregate pool capacity; anonymous callers get a reduced view. Poll no faster than every 30 s.',
      },
    },
  )
