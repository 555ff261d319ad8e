import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { AppError } from '../../lib/errors'

export const healthRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.health' })
    .use(authPlugin(deps))
    .get('/healthz', () => ({ status: 'ok' as const }), {
      public: true,
      detail: { tags: ['operations'], summary: 'Liveness' },
    })
    .get(
      '/readyz',
      async () => {
        try {
          await deps.store.ping()
          return { status: 'ready' as const }
        } catch {
          throw new AppError(503, 'not_ready', 'The database does not answer')
        }
      },
      { public: true, detail: { tags: ['operations'], summary: 'Readiness: the database answers' } },
    )
