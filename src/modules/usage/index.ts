import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { OrgModel } from '../orgs/model'
import { UsageModel } from './model'
import { allUsage, myUsage, orgUsage } from './service'

// docs/api.md §14 usage, in its three views: the caller's, an organization's, everyone's.
const tags = ['usage']
const response = { 200: UsageModel.list }

export const usageRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.usage' })
    .use(authPlugin(deps))
    .get('/v1/usage', ({ principal, query }) => myUsage(deps, principal, query), {
      user: true,
      query: UsageModel.query,
      response,
      detail: {
        tags,
        summary:
          'Tokens and requests of the caller’s completed batches per UTC day, model or creating key, ' +
          'within [start, end) (default: the last 30 days; at most 366)',
      },
    })
    .get(
      '/v1/orgs/:org_id/usage',
      ({ principal, params, query }) => orgUsage(deps, principal, params.org_id, query),
      {
        jwt: true,
        params: OrgModel.orgParams,
        query: UsageModel.orgQuery,
        response,
        detail: {
          tags,
          summary: 'The work the organization’s workers ran, per UTC day or model (owner or admin)',
        },
      },
    )
    .get('/v1/admin/usage', ({ query }) => allUsage(deps, query), {
      superadmin: true,
      query: UsageModel.adminQuery,
      response,
      detail: { tags, summary: 'Usage of every user, per UTC day, model, creating key or user' },
    })
