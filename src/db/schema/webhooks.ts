import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { users } from './accounts'

// Webhooks (docs/api.md §13): a user's endpoints, the outbox of events to deliver, and the log of
// delivery attempts. Outbox rows are written in the same transaction as the batch transition
// that causes them (src/store/*/webhooks.ts), so a crash loses none.

export const WEBHOOK_EVENT_TYPES = ['batch.validated', 'batch.completed', 'batch.failed'] as const
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number]

export const webhooks = sqliteTable(
  'webhooks',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    url: text().notNull(),
    // whsec_…, kept as is: delivery signs with it. Returned once by POST, never again.
    secret: text().notNull(),
    events: text({ mode: 'json' }).notNull().$type<WebhookEventType[]>(),
    created_at: integer().notNull(),
  },
  (t) => [index('webhooks_user').on(t.user_id, t.seq)],
)

// The outbox: one row per (webhook, event). `next_attempt_at` is also the lease: a deliverer
// moves it past the request's timeout and sets `lease`; a crashed deliverer's row is due again.
export const webhookMessages = sqliteTable(
  'webhook_messages',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(), // msg_…: the Standard Webhooks webhook-id, the same on every retry
    webhook_id: text()
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    batch_id: text().notNull(),
    type: text({ enum: WEBHOOK_EVENT_TYPES }).notNull(),
    created_at: integer().notNull(),
    status: text({ enum: ['pending', 'delivered', 'gave_up'] }).notNull(),
    attempts: integer().notNull().default(0),
    next_attempt_at: integer(),
    lease: text(),
  },
  (t) => [index('webhook_messages_due').on(t.status, t.next_attempt_at)],
)

// GET /v1/webhooks/{id}/deliveries: every attempt, newest first.
export const webhookAttempts = sqliteTable(
  'webhook_attempts',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(),
    webhook_id: text()
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    message_id: text().notNull(),
    batch_id: text().notNull(),
    type: text({ enum: WEBHOOK_EVENT_TYPES }).notNull(),
    attempted_at: integer().notNull(),
    outcome: text({ enum: ['delivered', 'failed', 'refused'] }).notNull(),
    status_code: integer(),
    error: text(),
    duration_ms: integer().notNull(),
  },
  (t) => [index('webhook_attempts_webhook').on(t.webhook_id, t.seq)],
)

export type WebhookRow = typeof webhooks.$inferSelect
export type WebhookMessageRow = typeof webhookMessages.$inferSelect
export type WebhookAttemptRow = typeof webhookAttempts.$inferSelect
