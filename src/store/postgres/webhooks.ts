import { and, eq, inArray, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { BatchRow, WebhookAttemptRow, WebhookRow } from '../../db/schema'
import type { BatchEvent } from '../../domain/batch-states'
import { WEBHOOK_EVENT_OF } from '../../domain/webhook-events'
import { newId } from '../../lib/ids'
import { attemptOutcome, leaseHeld } from '../statements'
import type { LeasedMessage, WebhooksStore } from '../webhooks'
import type { PgDb, PgTx } from './db'
import { pageRows } from './page'

// Webhooks on PostgreSQL, where several instances deliver from one outbox: a due message is
// leased with FOR UPDATE SKIP LOCKED, so each attempt is made by exactly one instance.

const { webhooks, webhookMessages, webhookAttempts } = schema

/**
 * docs/api.md §13 outbox, inside the caller's transaction (the batch transitions, postgres/queue.ts):
 * one pending message per webhook of each moved batch's owner that listens for its event. One
 * read of the owners' webhooks for any number of moved batches.
 */
export async function enqueueWebhookEvents(
  tx: PgTx,
  moved: { batch: BatchRow; event: BatchEvent }[],
  now: number,
) {
  const typed = moved.flatMap(({ batch, event }) => {
    const type = WEBHOOK_EVENT_OF[event]
    return type ? [{ batch, type }] : []
  })
  if (typed.length === 0) return
  const owners = [...new Set(typed.map((t) => t.batch.user_id))]
  // KEY SHARE: a webhook deleted meanwhile waits for this commit instead of failing the
  // transition (a worker's upload) on the outbox row's foreign key.
  const hooks = await tx
    .select({ id: webhooks.id, user_id: webhooks.user_id, events: webhooks.events })
    .from(webhooks)
    .where(owners.length === 1 ? eq(webhooks.user_id, owners[0]!) : inArray(webhooks.user_id, owners))
    .for('key share')
  if (hooks.length === 0) return
  const rows = typed.flatMap(({ batch, type }) =>
    hooks
      .filter((h) => h.user_id === batch.user_id && h.events.includes(type))
      .map((h) => ({
        id: newId('msg_'),
        webhook_id: h.id,
        batch_id: batch.id,
        type,
        created_at: now,
        status: 'pending' as const,
        next_attempt_at: now,
      })),
  )
  if (rows.length) await tx.insert(webhookMessages).values(rows)
}

export function postgresWebhooks(db: PgDb): WebhooksStore {
  const owned = (userId: string, id: string) => and(eq(webhooks.user_id, userId), eq(webhooks.id, id))
  return {
    async createWebhook(webhook) {
      const [row] = await db.insert(webhooks).values(webhook).returning()
      return row as WebhookRow
    },

    async listWebhooks(userId, page) {
      return pageRows<WebhookRow>(db, webhooks, eq(webhooks.user_id, userId), page)
    },

    async findWebhook(userId, id) {
      const [row] = await db.select().from(webhooks).where(owned(userId, id))
      return row as WebhookRow | undefined
    },

    async deleteWebhook(userId, id) {
      const rows = await db.delete(webhooks).where(owned(userId, id)).returning({ id: webhooks.id })
      return rows.length > 0
    },

    async listAttempts(webhookId, page) {
      return pageRows<WebhookAttemptRow>(db, webhookAttempts, eq(webhookAttempts.webhook_id, webhookId), page)
    },

    async leaseDue(now, leaseUntil, lease, limit) {
      const rows = (await db.execute(sql`
        WITH due AS (
          SELECT id FROM webhook_messages
          WHERE status = 'pending' AND next_attempt_at <= ${now}
          ORDER BY next_attempt_at
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )
        UPDATE webhook_messages m SET next_attempt_at = ${leaseUntil}, lease = ${lease}
        FROM due, webhooks w
        WHERE m.id = due.id AND w.id = m.webhook_id
        RETURNING m.id, m.seq::float8 AS seq, m.webhook_id, m.batch_id, m.type,
          m.created_at::float8 AS created_at, m.status, m.attempts, w.url, w.secret`)) as unknown as Omit<
        LeasedMessage,
        'next_attempt_at' | 'lease'
      >[]
      return rows.map((r) => ({ ...r, next_attempt_at: leaseUntil, lease }))
    },

    async recordAttempt(messageId, lease, result) {
      return db.transaction(async (tx) => {
        const updated = await tx
          .update(webhookMessages)
          .set(attemptOutcome(webhookMessages, result))
          .where(leaseHeld(webhookMessages, messageId, lease))
          .returning({ id: webhookMessages.id })
        if (updated.length === 0) return false
        await tx.insert(webhookAttempts).values(result.attempt)
        return true
      })
    },
  }
}
