import { openapi } from '@elysiajs/openapi'
import { Elysia } from 'elysia'
import pkg from '../package.json'
import type { Server } from './compose'
import { factsOf } from './http/context'
import { errorHandler } from './http/errors'
import { lifecycle } from './http/lifecycle'
import { checkJsonBody, checkUrl } from './http/parse'
import { adminRoutes } from './modules/admin'
import { auditRoutes } from './modules/audit'
import { authRoutes } from './modules/auth'
import { batchRoutes } from './modules/batches'
import { catalogueRoutes } from './modules/catalogue'
import { dashboardRoutes, docsUi } from './modules/dashboard'
import { fileRoutes } from './modules/files'
import { healthRoutes } from './modules/health'
import { metricsRoutes } from './modules/metrics'
import { orgRoutes } from './modules/orgs'
import { poolRoutes } from './modules/pool'
import { statsRoutes } from './modules/stats'
import { usageRoutes } from './modules/usage'
import { userRoutes } from './modules/users'
import { webhookRoutes } from './modules/webhooks'
import { workerRoutes } from './modules/workers'

/** The HTTP application: request ids and logging, the JSON parser, error mapping, docs, modules. */
export function createApp(deps: Server) {
  // Routes that read their URL beyond the path Bun matched: path parameters, or a query schema
  // (every handler that reads a query declares one). Only their URLs are checked (checkUrl):
  // reading `request.url` costs a request that never needs it about 2 µs of the server's CPU.
  const readsUrl = new Set<string>()
  const app = new Elysia({ name: 'gridkeep', normalize: false })
    .wrap(lifecycle(deps))
    // Names the route for the request's record, checks the URL of a route that reads it, and a
    // parsed JSON body (parsing itself is declared per route: jsonBody / optionalJsonBody in
    // src/http/parse.ts).
    // Destructured on purpose: Elysia's static analysis builds only the context fields a hook
    // names; one taking the whole context made every request parse its headers, query and
    // cookies (about a third of the heartbeat's throughput). A block body on purpose: Elysia
    // reads an arrow that returns a call as possibly async, and compiles the route as async.
    .onTransform({ as: 'global' }, ({ body, request, route }) => {
      factsOf(request).route = route
      if (readsUrl.has(route)) checkUrl(request)
      checkJsonBody(body)
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
        // docs/api.md §11: the reference UI comes from the binary, not from a CDN.
        scalar: docsUi,
      }),
    )
    .use(healthRoutes(deps))
    .use(metricsRoutes(deps))
    .use(authRoutes(deps))
    .use(userRoutes(deps))
    .use(orgRoutes(deps))
    .use(adminRoutes(deps))
    .use(fileRoutes(deps))
    .use(batchRoutes(deps))
    .use(catalogueRoutes(deps))
    .use(workerRoutes(deps))
    .use(poolRoutes(deps))
    .use(statsRoutes(deps))
    .use(usageRoutes(deps))
    .use(webhookRoutes(deps))
    .use(auditRoutes(deps))
    .use(dashboardRoutes(deps))
  for (const r of app.routes) if (/[:*]/.test(r.path) || r.hooks.query) readsUrl.add(r.path)
  return app
}

export type App = ReturnType<typeof createApp>
