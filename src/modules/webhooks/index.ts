import { Elysia, t } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody } from '../../http/parse'
import { PageQuery } from '../../lib/pagination'
import { WebhookModel } from './model'
import * as webhooks from './service'

const tags = ['webhooks']
const page = t.Object(PageQuery, { additionalProperties: false })

// docs/api.md §13: JWT or personal key; each user sees and deletes only their own webhooks.
export const webhookRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.webhooks', prefix: '/v1/webhooks' })
    .use(authPlugin(deps))
    .post('', ({ body, principal }) => webhooks.createWebhook(deps, principal, body), {
      user: true,
      ...jsonBody(WebhookModel.create),
      detail: { tags, summary: 'Create a webhook for own batch events; the secret is returned once' },
    })
    .get('', ({ query, principal }) => webhooks.listWebhooks(deps, principal, query), {
      user: true,
      query: page,
      detail: { tags, summary: 'List own webhooks, newest first (no secrets)' },
    })
    .get('/:webhook_id', ({ params, principal }) => webhooks.getWebhook(deps, principal, params.webhook_id), {
      user: true,
      params: WebhookModel.params,
      detail: { tags, summary: 'One own webhook (no secret)' },
    })
    .delete(
      '/:webhook_id',
      ({ params, principal }) => webhooks.deleteWebhook(deps, principal, params.webhook_id),
      {
        user: true,
        params: WebhookModel.params,
        detail: { tags, summary: 'Delete an own webhook, its pending deliveries and its delivery log' },
      },
    )
    .get(
      '/:webhook_id/deliveries',
      ({ params, query, principal }) => webhooks.listDeliveries(deps, principal, params.webhook_id, query),
      {
        user: true,
        params: WebhookModel.params,
        query: page,
        detail: { tags, summary: 'Delivery attempts of an own webhook, newest first' },
      },
    )
