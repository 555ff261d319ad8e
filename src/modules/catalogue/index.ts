import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { withRequestId } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { ModelList, ModelObject, ModelParams } from './model'
import * as catalogue from './service'
import type { CatalogueState } from './view'

const tags = ['models']

// The list is kept serialized (catalogue/view.ts): it goes out as it is, not re-encoded.
const JSON_HEADERS = { 'content-type': 'application/json' }

export const catalogueRoutes = (deps: Deps & CatalogueState & CredentialState) =>
  new Elysia({ name: 'routes.catalogue', prefix: '/v1/models' })
    .use(authPlugin(deps))
    .get(
      '',
      async ({ principal, request }) =>
        new Response(await catalogue.listModels(deps, principal), {
          headers: withRequestId(request, JSON_HEADERS),
        }),
      {
        user: true,
        response: { 200: ModelList },
        detail: {
          tags,
          summary: 'Selectable catalogue entries: public plus the caller’s orgs, enabled only',
        },
      },
    )
    .get('/:id', ({ principal, params }) => catalogue.getModel(deps, principal, params.id), {
      user: true,
      params: ModelParams,
      response: { 200: ModelObject },
      detail: { tags, summary: 'One selectable catalogue entry (404 when not visible)' },
    })
