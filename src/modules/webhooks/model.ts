import { t } from 'elysia'
import { WEBHOOK_EVENT_TYPES, type WebhookAttemptRow, type WebhookRow } from '../../db/schema'
import { pick } from '../../lib/pick'

const EventType = t.Union(
  WEBHOOK_EVENT_TYPES.map((e) => t.Literal(e)),
  { description: 'batch.validated, batch.completed or batch.failed' },
)

export const WebhookModel = {
  create: t.Object(
    {
      // Bounded loosely here so that the URL rules (urls.ts) answer a long URL with invalid_url.
      url: t.String({ minLength: 1, maxLength: 65536, description: 'http(s) URL, at most 2,048 characters' }),
      events: t.Optional(t.Array(EventType, { minItems: 1, maxItems: 3, uniqueItems: true })),
    },
    { additionalProperties: false },
  ),
  params: t.Object({ webhook_id: t.String({ maxLength: 64 }) }),
}

export const WebhookRecord = t.Object({
  id: t.String(),
  object: t.Literal('webhook'),
  url: t.String(),
  events: t.Array(EventType),
  created_at: t.Integer(),
  secret: t.Optional(t.String({ description: 'whsec_…: returned only once, on creation' })),
})
export type WebhookRecord = typeof WebhookRecord.static

export const toWebhookRecord = (w: WebhookRow): WebhookRecord => ({
  id: w.id,
  object: 'webhook',
  ...pick(w, ['url', 'events', 'created_at']),
})

export const DeliveryRecord = t.Object({
  id: t.String(),
  object: t.Literal('webhook.delivery'),
  event_id: t.String({ description: 'The webhook-id header: the same on every attempt of one event' }),
  event_type: EventType,
  batch_id: t.String(),
  attempted_at: t.Integer(),
  outcome: t.Union([t.Literal('delivered'), t.Literal('failed'), t.Literal('refused')]),
  status_code: t.Union([t.Integer(), t.Null()]),
  error: t.Union([t.String(), t.Null()]),
  duration_ms: t.Integer(),
})
export type DeliveryRecord = typeof DeliveryRecord.static

export const toDeliveryRecord = (a: WebhookAttemptRow): DeliveryRecord => ({
  id: a.id,
  object: 'webhook.delivery',
  event_id: a.message_id,
  event_type: a.type,
  ...pick(a, ['batch_id', 'attempted_at', 'outcome', 'status_code', 'error', 'duration_ms']),
})
