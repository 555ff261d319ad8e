import { bigint, bigserial, index, integer, pgTable, text } from 'drizzle-orm/pg-core'
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../schema/webhooks'
import { jsonb } from '../jsonb'
import { users } from './accounts'

// Webhooks (docs/api.md §13): endpoints, the outbox, the attempt log (see src/db/schema/webhooks.ts).
export const webhooks = pgTable(
  'webhooks',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    url: text().notNull(),
    secret: text().notNull(),
    events: jsonb().notNull().$type<WebhookEventType[]>(),
    created_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [index('webhooks_user').on(t.user_id, t.seq)],
)

export const webhookMessages = pgTable(
  'webhook_messages',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    webhook_id: text()
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    batch_id: text().notNull(),
    type: text({ enum: WEBHOOK_EVENT_TYPES }).notNull(),
    created_at: bigint({ mode: 'number' }).notNull(),
    status: text({ enum: ['pending', 'delivered', 'gave_up'] }).notNull(),
    attempts: integer().notNull().default(0),
    next_attempt_at: bigint({ mode: 'number' }),
    lease: text(),
  },
  (t) => [index('webhook_messages_due').on(t.status, t.next_attempt_at)],
)

export const webhookAttempts = pgTable(
  'webhook_attempts',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    webhook_id: text()
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    message_id: text().notNull(),
    batch_id: text().notNull(),
    type: text({ enum: WEBHOOK_EVENT_TYPES }).notNull(),
    attempted_at: bigint({ mode: 'number' }).notNull(),
    outcome: text({ enum: ['delivered', 'failed', 'refused'] }).notNull(),
    status_code: integer(),
    error: text(),
    duration_ms: integer().notNull(),
  },
  (t) => [index('webhook_attempts_webhook').on(t.webhook_id, t.seq)],
)
