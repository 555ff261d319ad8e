import { openapi } from '@elysiajs/openapi'
import { Elysia } from 'elysia'
import pkg from '../package.json'
import type { Deps } from './deps'
import { beginRequest, requestFacts } from './http/context'
import { errorHandler } from './http/errors'
import { parseBody } from './http/parse'
import { log } from './lib/logger'
import { adminRoutes } from './modules/admin'
import { authRoutes } from './modules/auth'
import { batchRoutes } from './modules/batches'
import { catalogueRoutes } from './modules/catalogue'
import { fileRoutes } from './modules/files'
import { healthRoutes } from './modules/health'
import { orgRoutes } from './modules/orgs'
import { poolRoutes } from './modules/pool'
import { userRoutes } from './modules/users'
import { workerRoutes } from './modules/workers'

/** The HTTP application: request ids and logging, the JSON parser, error mapping, docs, modules. */
export function createApp(deps: Deps) {
  return new Elysia({ name: 'gridkeep', normalize: false })
    .onRequest(({ request, set }) => {
      set.headers['x-request-id'] = beginRequest(request).id
    })
    .onParse({ as: 'global' }, ({ request, contentType }) => parseBody(request, contentType))
    .onAfterResponse({ as: 'global' }, ({ request, route, set }) => {
      const facts = requestFacts(request)
      log.info('request', {
        request_id: facts?.id,
        method: request.method,
        route: route || new URL(request.url).pathname,
        status: typeof set.status === 'number' ? set.status : 200,
        duration_ms: facts ? Math.round((performance.now() - facts.startedMs) * 100) / 100 : undefined,
      })
    })
    .use(errorHandler)
    .use(
      openapi({
        path: '/docs',
        specPath: '/openapi.json',
        documentation: {
          info: {
            title: 'gridkeep',
            version: pkg.version,
            description:
              'Self-hosted control plane for batch LLM inference. User endpoints follow the OpenAI Files and ' +
              'Batch API shapes; worker daemons speak the /workers protocol with an organization worker key.',
          },
          components: {
            securitySchemes: {
              bearerAuth: {
                type: 'http',
                scheme: 'bearer',
                description: 'A JWT from /v1/auth/login, a personal key, or an org worker key (gk-…)',
              },
            },
          },
        },
        exclude: { paths: ['/docs', '/openapi.json'] },
      }),
    )
    .use(healthRoutes(deps))
    .use(authRoutes(deps))
    .use(userRoutes(deps))
    .use(orgRoutes(deps))
    .use(adminRoutes(deps))
    .use(fileRoutes(deps))
    .use(batchRoutes(deps))
    .use(catalogueRoutes(deps))
    .use(workerRoutes(deps))
    .use(poolRoutes(deps))
}

export type App = ReturnType<typeof createApp>
