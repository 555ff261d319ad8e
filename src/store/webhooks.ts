import type { WebhookAttemptRow, WebhookEventType, WebhookMessageRow, WebhookRow } from '../db/schema'
import type { PageParams, RowsPage } from '../lib/pagination'

// Webhooks (docs/api.md §13). The outbox rows are written by each engine's batch transition
// (sqlite/webhooks.ts, postgres/webhooks.ts: enqueueWebhookEvents) in the transition's own
// transaction; the deliverer (src/services/webhooks.ts) leases due rows, makes the attempt outside
// any transaction, and records it. The retry rule (when next, when to give up) lives in the service.

export interface NewWebhook {
  id: string
  user_id: string
  url: string
  secret: string
  events: WebhookEventType[]
  created_at: number
}

/** An outbox row leased for one attempt, with what the attempt needs of its webhook. */
export interface LeasedMessage extends WebhookMessageRow {
  url: string
  secret: string
  lease: string
}

/** One attempt's record and what becomes of its message. */
export interface AttemptResult {
  attempt: Omit<WebhookAttemptRow, 'seq'>
  /** delivered: done; pending: retried at next_attempt_at; gave_up: no more attempts. */
  status: WebhookMessageRow['status']
  next_attempt_at: number | null
}

export interface WebhooksStore {
  /** POST /v1/webhooks. */
  createWebhook(webhook: NewWebhook): Promise<WebhookRow>
  /** GET /v1/webhooks: the user's webhooks, newest first (docs/api.md §0 paging). */
  listWebhooks(userId: string, page: PageParams): Promise<RowsPage<WebhookRow>>
  /** One webhook of the user; undefined for another user's or an unknown id (→ 404). */
  findWebhook(userId: string, id: string): Promise<WebhookRow | undefined>
  /** DELETE /v1/webhooks/{id}: with its outbox and attempt log; false when not the user's. */
  deleteWebhook(userId: string, id: string): Promise<boolean>
  /** GET /v1/webhooks/{id}/deliveries: attempts of one webhook, newest first. */
  listAttempts(webhookId: string, page: PageParams): Promise<RowsPage<WebhookAttemptRow>>
  /**
   * Leases up to `limit` pending messages due at `now` for one attempt each: their
   * next_attempt_at moves to `leaseUntil` under the token `lease`. Two deliverers (or instances)
   * never lease the same message at once; a crashed one's lease lapses at `leaseUntil`.
   */
  leaseDue(now: number, leaseUntil: number, lease: string, limit: number): Promise<LeasedMessage[]>
  /**
   * Records an attempt and the message's new state, only while `lease` still holds it (false:
   * the lease lapsed and another deliverer took over; nothing is written).
   */
  recordAttempt(messageId: string, lease: string, result: AttemptResult): Promise<boolean>
}
