import { openapi } from '@elysiajs/openapi'
import { type Context, Elysia, ElysiaCustomStatusResponse, StatusMap } from 'elysia'
import pkg from '../package.json'
import type { Deps } from './deps'
import { beginRequest, pathOf, requestFacts } from './http/context'
import { errorHandler, toAppError } from './http/errors'
import { checkBodyHeaders, checkJsonBody, checkUrl } from './http/parse'
import { log, logEnabled } from './lib/logger'
import { adminRoutes } from './modules/admin'
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
export function createApp(deps: Deps) {
  return (
    new Elysia({ name: 'gridkeep', normalize: false })
      .onRequest(({ request, set }) => {
        set.headers['x-request-id'] = beginRequest(request, deps.clock.monotonicMs()).id
        deps.requestsOpen++
        checkUrl(request)
        checkBodyHeaders(request)
      })
      // Parsing itself is declared per route (jsonBody / optionalJsonBody in src/http/parse.ts).
      // A block body on purpose: Elysia reads an arrow that returns a call as possibly async and
      // awaits it on every request.
      .onTransform({ as: 'global' }, ({ body }) => {
        checkJsonBody(body)
      })
      // Destructured on purpose: Elysia's static analysis builds only the context fields its hooks
      // name. A hook taking the whole context made every request parse its headers, query and
      // cookies (about a third of the heartbeat's throughput).
      .onAfterResponse(
        { as: 'global' },
        ({ request, route, set, responseValue, error, code }: AfterResponse) => {
          deps.requestsOpen--
          recordRequest(deps, { request, route, set, responseValue, error, code })
        },
      )
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
          // API.md §11: the reference UI comes from the binary, not from a CDN.
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
      .use(dashboardRoutes(deps))
  )
}

export type App = ReturnType<typeof createApp>

/**
 * Every request is logged and counted exactly once, here, when its response is complete: errors
 * and unmatched paths included (issue 6). The log carries the path without its query string (a
 * query may carry a token); metrics carry only the route pattern (bounded label cardinality).
 */
type AfterResponse = Pick<Context, 'request' | 'route' | 'set'> & {
  responseValue?: unknown
  error?: unknown
  code?: string | number
}

function recordRequest(deps: Deps, ctx: AfterResponse) {
  const { request, route } = ctx
  const facts = requestFacts(request)
  const status = responseStatus(ctx)
  const seconds = facts ? (deps.clock.monotonicMs() - facts.startedMs) / 1000 : 0
  deps.metrics.http.record(request.method, route || 'unmatched', status, seconds)
  if (!logEnabled('info')) return
  log.info('request', {
    request_id: facts?.id,
    method: request.method,
    route: route || null,
    path: pathOf(request.url),
    status,
    duration_ms: Math.round(seconds * 100_000) / 100,
  })
}

/**
 * The status actually sent. `set.status` alone is not it: an error answered by the error handler
 * (404, 400 from validation, 500) leaves it untouched, and so does a handler returning a Response.
 * The error handler's own mapping (toAppError) gives the errors' status.
 */
function responseStatus(ctx: AfterResponse): number {
  const { error, code } = ctx
  if (error !== undefined && error !== null) return toAppError(error, code ?? 'UNKNOWN').status
  const value = ctx.responseValue
  if (value instanceof Response) return value.status
  if (value instanceof ElysiaCustomStatusResponse && typeof value.code === 'number') return value.code
  const s = ctx.set.status
  if (typeof s === 'number') return s
  if (typeof s === 'string') return (StatusMap as Record<string, number>)[s] ?? 200
  return 200
}
