import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody } from '../../http/parse'
import type { BatchEventsState } from '../../lib/batch-events'
import type { EventStreamsState } from './events'
import { openBatchEvents } from './events'
import type { FollowState } from './follow'
import { BatchModel } from './model'
import * as batches from './service'

const tags = ['batches']

// No cancel route: docs/api.md §6 "No endpoint cancels a batch", so POST /v1/batches/{id}/cancel is a 404.
export const batchRoutes = (
  deps: Deps & BatchEventsState & CredentialState & EventStreamsState & FollowState,
) =>
  new Elysia({ name: 'routes.batches', prefix: '/v1/batches' })
    .use(authPlugin(deps))
    .post('', ({ body, principal }) => batches.createBatch(deps, principal, body), {
      user: true,
      ...jsonBody(BatchModel.create),
      detail: { tags, summary: 'Create a batch from an uploaded file; validation runs asynchronously' },
    })
    .get('', ({ query, principal }) => batches.listBatches(deps, principal, query), {
      user: true,
      query: BatchModel.list,
      detail: { tags, summary: 'List own batches (a superadmin sees all), newest first' },
    })
    .get('/:batch_id', ({ params, principal }) => batches.getBatch(deps, principal, params.batch_id), {
      user: true,
      params: BatchModel.params,
      detail: { tags, summary: 'Batch detail (owner or superadmin)' },
    })
    .get(
      '/:batch_id/shards',
      ({ params, query, principal }) => batches.listShards(deps, principal, params.batch_id, query),
      {
        user: true,
        params: BatchModel.params,
        query: BatchModel.shards,
        detail: {
          tags,
          summary:
            "A split batch's shards in order: waiting, running (on which worker) or done, with attempts",
        },
      },
    )
    .get(
      '/:batch_id/events',
      ({ params, query, principal }) =>
        openBatchEvents(deps, principal, params.batch_id, query.follow === '1'),
      {
        user: true,
        params: BatchModel.params,
        query: BatchModel.events,
        detail: {
          tags,
          summary:
            'Server-sent validation events: status, progress, error, done; with follow=1, then status and waiting until the batch ends',
          responses: { 200: { description: 'text/event-stream', content: { 'text/event-stream': {} } } },
        },
      },
    )
