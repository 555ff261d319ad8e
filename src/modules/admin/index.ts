import { Elysia, t } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { auditContext } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody } from '../../http/parse'
import { PageQuery } from '../../lib/pagination'
import { listWorkers } from '../workers/listing'
import { AdminModel } from './model'
import * as admin from './service'

const tags = ['admin']
const page = t.Object(PageQuery, { additionalProperties: false })

export const adminRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.admin', prefix: '/v1/admin' })
    .use(authPlugin(deps))
    .get('/users', ({ query }) => admin.listUsers(deps, query), {
      superadmin: true,
      query: page,
      detail: { tags, summary: 'List all users' },
    })
    .post(
      '/users',
      async ({ body, principal, status, request, server }) =>
        status(201, await admin.createUserAsAdmin(deps, principal, body, auditContext(request, server))),
      {
        superadmin: true,
        ...jsonBody(AdminModel.createUser),
        detail: {
          tags,
          summary:
            'Create a user who must change the password at first login (with PASSWORD_LOGIN=false: no password, single sign-on)',
        },
      },
    )
    .patch(
      '/users/:user_id',
      ({ body, params, principal, request, server }) =>
        admin.updateUser(deps, principal, params.user_id, body, auditContext(request, server)),
      {
        superadmin: true,
        params: t.Object({ user_id: t.String({ maxLength: 64 }) }),
        ...jsonBody(AdminModel.updateUser),
        detail: { tags, summary: 'Activate, deactivate, promote or demote a user' },
      },
    )
    .get('/workers', ({ query }) => listWorkers(deps, null, query), {
      superadmin: true,
      query: page,
      detail: { tags, summary: 'List all workers across orgs' },
    })
    .get('/organizations', ({ query }) => admin.listOrganizations(deps, query), {
      superadmin: true,
      query: page,
      detail: { tags, summary: 'List all organizations' },
    })
