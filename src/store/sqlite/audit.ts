import { asc, inArray, lt } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { type AuditEventRow, auditEvents } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import { type AuditContext, type AuditEvent, auditExpired, auditRow } from '../../domain/audit'
import type { AuditStore } from '../audit'
import { auditWhere } from '../statements'
import type { SqliteDeps } from './deps'
import { pageRows } from './page'

// The audit log on SQLite (docs/api.md §17).

/**
 * Writes a change's entries in the caller's transaction (docs/api.md §17): every store function
 * that makes a security-relevant change calls this inside its writeTx, so the change and its
 * entries commit or roll back together.
 */
export function appendAudit(tx: Tx | Db, ctx: AuditContext, events: AuditEvent[], now: number): void {
  if (events.length === 0) return
  tx.insert(auditEvents)
    .values(events.map((e) => auditRow(ctx, e, now)))
    .run()
}

export function sqliteAudit(deps: SqliteDeps): AuditStore {
  const { db } = deps
  return {
    async record(ctx, events, now) {
      writeTx(db, (tx) => appendAudit(tx, ctx, events, now))
    },

    async page(filter, query) {
      return pageRows<AuditEventRow>(db, auditEvents, auditWhere(auditEvents, filter), query)
    },

    async expire(before, limit, now, audit) {
      return writeTx(db, (tx) => {
        const due = tx
          .select({ seq: auditEvents.seq })
          .from(auditEvents)
          .where(lt(auditEvents.created_at, before))
          .orderBy(asc(auditEvents.created_at))
          .limit(limit)
          .all()
          .map((r) => r.seq)
        if (due.length === 0) return 0
        tx.delete(auditEvents).where(inArray(auditEvents.seq, due)).run()
        appendAudit(tx, audit, auditExpired(due.length, before), now)
        return due.length
      })
    },
  }
}
