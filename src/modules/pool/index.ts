import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { poolCapacity } from './service'

export const poolRoutes = (deps: Deps) =>
  new Elysia({ name: 'routes.pool', prefix: '/v1/pool' }).use(authPlugin(deps)).get(
    '/capacity',
    ({ principal, set }) => {
      set.headers['cache-control'] = `max-age=${deps.config.POOL_CACHE_SECONDS}`
      return poolCapacity(deps, principal)
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
