import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { StatsModel } from './model'
import type { StatsState } from './service'
import { CACHE_SECONDS, queueStats } from './service'

export const statsRoutes = (deps: Deps & CredentialState & StatsState) =>
  new Elysia({ name: 'routes.stats', prefix: '/v1/stats' }).use(authPlugin(deps)).get(
    '/queue',
    ({ set }) => {
      set.headers['cache-control'] = `private, max-age=${CACHE_SECONDS}`
      return queueStats(deps)
    },
    {
      user: true,
      response: { 200: StatsModel.queue },
      detail: {
        tags: ['stats'],
        summary:
          'Queue depth and throughput over the last hour, one point per minute (the dashboard chart). ' +
          'Counts over all batches; recomputed at most every 5 s.',
      },
    },
  )
