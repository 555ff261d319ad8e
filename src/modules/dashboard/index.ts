import type { openapi } from '@elysiajs/openapi'
import { Elysia } from 'elysia'
import scalarScript from '../../../node_modules/@scalar/api-reference/dist/browser/standalone.js' with {
  type: 'file',
}
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { AppError } from '../../lib/errors'
import { ASSET_PREFIX, loadDashboard } from './bundle'

// docs/api.md §11: the dashboard at `/`, every path under `/app/`, and `/reset-password` (the page the
// reset mail links to). No catch-all: `/v1/**` and `/workers/**` keep their JSON 404 envelope.
// These are ordinary routes, so the page carries the request id, log line and metrics of any other.

/** The API reference UI's script, served from the binary so `/docs` works without internet. */
export const DOCS_SCRIPT_PATH = '/docs/assets/api-reference.js'

// The plugin types Scalar's configuration after its defaults are applied (every field present);
// these two are the only ones set. No default fonts: they would be fetched from Scalar's servers.
type ScalarConfig = NonNullable<NonNullable<Parameters<typeof openapi>[0]>['scalar']>
export const docsUi = { cdn: DOCS_SCRIPT_PATH, withDefaultFonts: false } as ScalarConfig

// docs/api.md §11: `default-src 'self'`, no inline script. frame-ancestors keeps it out of others' frames.
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': "default-src 'self'; frame-ancestors 'none'",
  'cache-control': 'no-cache',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
}

const page = async () => new Response((await loadDashboard()).html, { headers: PAGE_HEADERS })
const hidden = { public: true, detail: { hide: true } } as const

export const dashboardRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.dashboard' })
    .use(authPlugin(deps))
    .get('/', page, hidden)
    .get('/app', page, hidden)
    .get('/app/*', page, hidden)
    .get('/reset-password', page, hidden)
    .get(
      `${ASSET_PREFIX}:name`,
      async ({ params }) => {
        const asset = (await loadDashboard()).assets.get(params.name)
        if (!asset) throw new AppError(404, 'not_found', 'No such asset')
        return new Response(asset.body, {
          headers: {
            'content-type': asset.type,
            // File names carry a content hash: a new build links new names.
            'cache-control': 'public, max-age=31536000, immutable',
            'x-content-type-options': 'nosniff',
          },
        })
      },
      hidden,
    )
    .get(
      DOCS_SCRIPT_PATH,
      () =>
        new Response(Bun.file(scalarScript), {
          headers: {
            'content-type': 'text/javascript; charset=utf-8',
            'cache-control': 'public, max-age=3600',
          },
        }),
      hidden,
    )
