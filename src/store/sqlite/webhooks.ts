import { and, asc, eq, lte, sql } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { placeholders, preparedOnce } from '../../db/prepared'
import {
  type BatchRow,
  type WebhookAttemptRow,
  type WebhookRow,
  webhookAttempts,
  webhookMessages,
  webhooks,
} from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { BatchEvent } from '../../domain/batch-states'
import { WEBHOOK_EVENT_OF } from '../../domain/webhook-events'
import { newId } from '../../lib/ids'
import { attemptOutcome, leaseHeld } from '../statements'
import type { LeasedMessage, WebhooksStore } from '../webhooks'
import { pageRows } from './page'

// Webhooks on SQLite: one process, each verb one BEGIN IMMEDIATE transaction.

const stmts = preparedOnce((db: Db) => ({
  hooksOf: db
    .select({ id: webhooks.id, events: webhooks.events })
    .from(webhooks)
    .where(eq(webhooks.user_id, sql.placeholder('user_id')))
    .prepare(),
  insertMessage: db
    .insert(webhookMessages)
    .values({
      ...placeholders(['id', 'webhook_id', 'batch_id', 'type'], {
        created_at: 'now',
        next_attempt_at: 'now',
      }),
      status: 'pending',
    })
    .prepare(),
  // Index-only on webhook_messages_due (status, next_attempt_at).
  anyDue: db
    .select({ at: webhookMessages.next_attempt_at })
    .from(webhookMessages)
    .where(
      and(
        eq(webhookMessages.status, 'pending'),
        lte(webhookMessages.next_attempt_at, sql.placeholder('now') as never),
      ),
    )
    .limit(1)
    .prepare(),
}))

/**
 * docs/api.md §13 outbox, inside the caller's writeTx (the batch transition, src/store/sqlite/
 * transition.ts): one pending message per webhook of the batch's owner that listens for the event.
 */
export function enqueueWebhookEvents(deps: { db: Db }, batch: BatchRow, event: BatchEvent, now: number) {
  const type = WEBHOOK_EVENT_OF[event]
  if (!type) return
  const s = stmts(deps)
  for (const hook of s.hooksOf.all({ user_id: batch.user_id })) {
    if (!hook.events.includes(type)) continue
    s.insertMessage.run({ id: newId('msg_'), webhook_id: hook.id, batch_id: batch.id, type, now })
  }
}

export function sqliteWebhooks(deps: { db: Db }): WebhooksStore {
  const { db } = deps
  const owned = (userId: string, id: string) => and(eq(webhooks.user_id, userId), eq(webhooks.id, id))
  return {
    async createWebhook(webhook) {
      return db.insert(webhooks).values(webhook).returning().get()
    },

    async listWebhooks(userId, page) {
      return pageRows<WebhookRow>(db, webhooks, eq(webhooks.user_id, userId), page)
    },

    async findWebhook(userId, id) {
      return db.select().from(webhooks).where(owned(userId, id)).get()
    },

    async deleteWebhook(userId, id) {
      return db.delete(webhooks).where(owned(userId, id)).returning({ id: webhooks.id }).all().length > 0
    },

    async listAttempts(webhookId, page) {
      return pageRows<WebhookAttemptRow>(db, webhookAttempts, eq(webhookAttempts.webhook_id, webhookId), page)
    },

    async leaseDue(now, leaseUntil, lease, limit) {
      // The delivery loop asks every second; with nothing due it reads one index entry and never
      // takes the write lock (a writer elsewhere is not made to wait for an idle pass).
      if (stmts(deps).anyDue.get({ now }) === undefined) return []
      return writeTx(db, (tx) => {
        const due = tx
          .select({ message: webhookMessages, url: webhooks.url, secret: webhooks.secret })
          .from(webhookMessages)
          .innerJoin(webhooks, eq(webhooks.id, webhookMessages.webhook_id))
          .where(and(eq(webhookMessages.status, 'pending'), lte(webhookMessages.next_attempt_at, now)))
          .orderBy(asc(webhookMessages.next_attempt_at))
          .limit(limit)
          .all()
        const leased: LeasedMessage[] = []
        for (const d of due) {
          tx.update(webhookMessages)
            .set({ next_attempt_at: leaseUntil, lease })
            .where(eq(webhookMessages.id, d.message.id))
            .run()
          leased.push({ ...d.message, next_attempt_at: leaseUntil, lease, url: d.url, secret: d.secret })
        }
        return leased
      })
    },

    async recordAttempt(messageId, lease, result) {
      return writeTx(db, (tx) => {
        const updated = tx
          .update(webhookMessages)
          .set(attemptOutcome(webhookMessages, result))
          .where(leaseHeld(webhookMessages, messageId, lease))
          .returning({ id: webhookMessages.id })
          .all()
        if (updated.length === 0) return false
        tx.insert(webhookAttempts).values(result.attempt).run()
        return true
      })
    },
  }
}
