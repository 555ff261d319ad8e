import { Elysia, t } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { auditContext } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody, optionalJsonBody } from '../../http/parse'
import type { CatalogueState } from '../catalogue/view'
import { KeyModel } from '../keys/model'
import * as keys from '../keys/service'
import { listWorkers } from '../workers/listing'
import { removeWorker } from '../workers/service'
import type { PollState } from '../workers/waiters'
import { requireOrgRole } from './access'
import { OrgModel } from './model'
import * as orgs from './service'

const tags = ['organizations']
const workerKeys = (orgId: string) => ({ type: 'worker' as const, orgId })

export const orgRoutes = (deps: Deps & CredentialState & CatalogueState & PollState) =>
  new Elysia({ name: 'routes.orgs', prefix: '/v1/orgs' })
    .use(authPlugin(deps))
    .get('', ({ principal, query }) => orgs.listMyOrgs(deps, principal, query), {
      jwt: true,
      query: OrgModel.page,
      detail: { tags, summary: 'Organizations the caller belongs to' },
    })
    .post(
      '',
      async ({ principal, body, status, request, server }) =>
        status(201, await orgs.createTeamOrg(deps, principal, body, auditContext(request, server))),
      {
        jwt: true,
        ...jsonBody(OrgModel.create),
        detail: { tags, summary: 'Create a team organization (caller becomes owner)' },
      },
    )
    .delete(
      '/:org_id',
      ({ principal, params, request, server }) =>
        orgs.deleteOrg(deps, principal, params.org_id, auditContext(request, server)),
      {
        jwt: true,
        params: OrgModel.orgParams,
        detail: {
          tags,
          summary:
            'Delete a team organization (owner only; 409 while it has workers): its worker keys and memberships go with it',
        },
      },
    )
    .get(
      '/:org_id/api-keys',
      async ({ principal, params, query }) => {
        await requireOrgRole(deps, principal, params.org_id, 'viewer')
        return keys.listKeys(deps, workerKeys(params.org_id), query)
      },
      {
        jwt: true,
        params: OrgModel.orgParams,
        query: OrgModel.page,
        detail: { tags, summary: 'List worker keys (prefix only)' },
      },
    )
    .post(
      '/:org_id/api-keys',
      async ({ principal, params, body, status, request, server }) => {
        await requireOrgRole(deps, principal, params.org_id, 'admin')
        return status(
          201,
          await keys.createKey(
            deps,
            workerKeys(params.org_id),
            principal,
            body ?? {},
            auditContext(request, server),
          ),
        )
      },
      {
        jwt: true,
        params: OrgModel.orgParams,
        ...optionalJsonBody(t.Optional(KeyModel.create)),
        detail: { tags, summary: 'Create a worker key (owner or admin); the raw key is returned once' },
      },
    )
    .post(
      '/:org_id/api-keys/regenerate',
      async ({ principal, params, body, status, request, server }) => {
        await requireOrgRole(deps, principal, params.org_id, 'admin')
        return status(
          201,
          await keys.regenerateKey(
            deps,
            workerKeys(params.org_id),
            principal,
            body?.key_id,
            auditContext(request, server),
          ),
        )
      },
      {
        jwt: true,
        params: OrgModel.orgParams,
        ...optionalJsonBody(KeyModel.regenerate),
        detail: { tags, summary: 'Rotate the org worker key (owner or admin)' },
      },
    )
    .delete(
      '/:org_id/api-keys/:key_id',
      async ({ principal, params, request, server }) => {
        await requireOrgRole(deps, principal, params.org_id, 'admin')
        return keys.revokeKey(deps, workerKeys(params.org_id), params.key_id, auditContext(request, server))
      },
      {
        jwt: true,
        params: OrgModel.keyParams,
        detail: { tags, summary: 'Revoke a worker key; daemons using it stop at their next request' },
      },
    )
    .get(
      '/:org_id/workers',
      async ({ principal, params, query }) => {
        await requireOrgRole(deps, principal, params.org_id, 'viewer')
        return listWorkers(deps, params.org_id, query)
      },
      {
        jwt: true,
        params: OrgModel.orgParams,
        query: OrgModel.page,
        detail: { tags, summary: "The org's workers: status, activity, live VRAM, loaded models" },
      },
    )
    .delete(
      '/:org_id/workers/:worker_id',
      async ({ principal, params, request, server }) => {
        await requireOrgRole(deps, principal, params.org_id, 'admin')
        return removeWorker(deps, params.org_id, params.worker_id, auditContext(request, server))
      },
      {
        jwt: true,
        params: OrgModel.workerParams,
        detail: {
          tags,
          summary:
            'Remove a worker (owner or admin): what it holds goes back to the queue, uncounted; a daemon still running registers anew',
        },
      },
    )
    .get('/:org_id/members', ({ principal, params }) => orgs.listMembers(deps, principal, params.org_id), {
      jwt: true,
      params: OrgModel.orgParams,
      detail: { tags, summary: 'List members' },
    })
    .post(
      '/:org_id/members',
      async ({ principal, params, body, status, request, server }) =>
        status(
          201,
          await orgs.addMember(deps, principal, params.org_id, body, auditContext(request, server)),
        ),
      {
        jwt: true,
        params: OrgModel.orgParams,
        ...jsonBody(OrgModel.addMember),
        detail: { tags, summary: 'Add a member (owner or admin)' },
      },
    )
    .patch(
      '/:org_id/members/:user_id',
      ({ principal, params, body, request, server }) =>
        orgs.updateMember(
          deps,
          principal,
          params.org_id,
          params.user_id,
          body,
          auditContext(request, server),
        ),
      {
        jwt: true,
        params: OrgModel.memberParams,
        ...jsonBody(OrgModel.updateMember),
        detail: { tags, summary: "Change a member's role" },
      },
    )
    .delete(
      '/:org_id/members/:user_id',
      ({ principal, params, request, server }) =>
        orgs.removeMember(deps, principal, params.org_id, params.user_id, auditContext(request, server)),
      { jwt: true, params: OrgModel.memberParams, detail: { tags, summary: 'Remove a member, or leave' } },
    )
