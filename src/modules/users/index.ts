import { Elysia, t } from 'elysia'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import { authPlugin } from '../../http/auth'
import { auditContext } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody, optionalJsonBody } from '../../http/parse'
import { PageQuery } from '../../lib/pagination'
import { KeyModel } from '../keys/model'
import * as keys from '../keys/service'

const tags = ['api-keys']
const own = (p: UserPrincipal) => ({ type: 'personal' as const, userId: p.user.id })

export const userRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.users', prefix: '/v1/users/me/api-keys' })
    .use(authPlugin(deps))
    .post(
      '',
      async ({ body, principal, status, request, server }) =>
        status(
          201,
          await keys.createKey(deps, own(principal), principal, body ?? {}, auditContext(request, server)),
        ),
      {
        jwt: true,
        ...optionalJsonBody(t.Optional(KeyModel.create)),
        detail: { tags, summary: 'Create a personal key; the raw key is returned once' },
      },
    )
    .get('', ({ query, principal }) => keys.listKeys(deps, own(principal), query), {
      jwt: true,
      query: t.Object(PageQuery, { additionalProperties: false }),
      detail: { tags, summary: 'List own personal keys (prefix only)' },
    })
    .get('/:key_id', ({ params, principal }) => keys.getKey(deps, own(principal), params.key_id), {
      jwt: true,
      params: KeyModel.params,
      detail: { tags, summary: 'One personal key (prefix only)' },
    })
    .put(
      '/:key_id',
      ({ params, body, principal, request, server }) =>
        keys.updateKey(deps, own(principal), params.key_id, body, auditContext(request, server)),
      {
        jwt: true,
        params: KeyModel.params,
        ...jsonBody(KeyModel.update),
        detail: { tags, summary: 'Rename, set expiry, or revoke' },
      },
    )
    // docs/api.md §3 (ext): the one route a personal key may call here, on its own id (logout).
    .delete(
      '/:key_id',
      ({ params, principal, request, server }) =>
        keys.revokeKey(deps, own(principal), params.key_id, auditContext(request, server)),
      {
        self: true,
        params: KeyModel.params,
        detail: { tags, summary: 'Revoke (idempotent); a personal key may revoke itself' },
      },
    )
