import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { checkMetricsToken, renderMetrics } from './service'

// Outside the user credential matrix (docs/api.md §10): open by default, or guarded by METRICS_TOKEN,
// which this module checks itself. `public` makes the auth plugin ignore the Authorization header.
export const metricsRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.metrics' }).use(authPlugin(deps)).get(
    '/metrics',
    async ({ request }) => {
      checkMetricsToken(deps, request.headers.get('authorization'))
      const { body, contentType } = await renderMetrics(deps)
      return new Response(body, { headers: { 'content-type': contentType } })
    },
    {
      public: true,
      detail: {
        tags: ['operations'],
        summary: 'Prometheus metrics',
        description: 'Open unless METRICS_TOKEN is set; then `Authorization: Bearer <METRICS_TOKEN>`.',
      },
    },
  )
