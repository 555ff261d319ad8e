import { asc, inArray, lt } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { AuditEventRow } from '../../db/schema'
import { type AuditContext, type AuditEvent, auditExpired, auditRow } from '../../domain/audit'
import type { AuditStore } from '../audit'
import { auditWhere } from '../statements'
import type { PgDb, PgTx } from './db'
import { pageRows } from './page'

// The audit log on PostgreSQL (docs/api.md §17).

const { auditEvents } = schema

/**
 * Writes a change's entries in the caller's transaction (docs/api.md §17): every store function
 * that makes a security-relevant change calls this inside its transaction, so the change and its
 * entries commit or roll back together.
 */
export async function appendAudit(
  tx: PgTx | PgDb,
  ctx: AuditContext,
  events: AuditEvent[],
  now: number,
): Promise<void> {
  if (events.length === 0) return
  await tx.insert(auditEvents).values(events.map((e) => auditRow(ctx, e, now)))
}

export function postgresAudit(db: PgDb): AuditStore {
  return {
    async record(ctx, events, now) {
      await db.transaction((tx) => appendAudit(tx, ctx, events, now))
    },

    async page(filter, query) {
      return pageRows<AuditEventRow>(db, auditEvents, auditWhere(auditEvents, filter), query)
    },

    async expire(before, limit, now, audit) {
      return db.transaction(async (tx) => {
        // SKIP LOCKED: two instances' passes (one wins the interval, docs/api.md §12) never wait on
        // each other's rows.
        const due = await tx
          .select({ seq: auditEvents.seq })
          .from(auditEvents)
          .where(lt(auditEvents.created_at, before))
          .orderBy(asc(auditEvents.created_at))
          .limit(limit)
          .for('update', { skipLocked: true })
        if (due.length === 0) return 0
        await tx.delete(auditEvents).where(
          inArray(
            auditEvents.seq,
            due.map((r) => r.seq),
          ),
        )
        await appendAudit(tx, audit, auditExpired(due.length, before), now)
        return due.length
      })
    },
  }
}
