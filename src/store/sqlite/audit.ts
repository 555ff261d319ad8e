import { and, asc, eq, gte, inArray, lt, type SQL } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { type AuditEventRow, auditEvents } from '../../db/schema'
import { type Tx, writeTx } from '../../db/tx'
import {
  type AuditContext,
  type AuditEvent,
  type AuditFilter,
  auditExpired,
  auditRow,
} from '../../domain/audit'
import type { AuditStore } from '../audit'
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

function auditWhere(f: AuditFilter): SQL | undefined {
  const a = f.actor
  return and(
    a?.by === 'user' ? eq(auditEvents.actor_user_id, a.id) : undefined,
    a?.by === 'key' ? eq(auditEvents.actor_id, a.id) : undefined,
    a?.by === 'kind' ? eq(auditEvents.actor_kind, a.kind) : undefined,
    f.actions ? inArray(auditEvents.action, f.actions) : undefined,
    f.target_kind ? eq(auditEvents.target_kind, f.target_kind) : undefined,
    f.target_id !== undefined ? eq(auditEvents.target_id, f.target_id) : undefined,
    f.org_id !== undefined ? eq(auditEvents.org_id, f.org_id) : undefined,
    f.visible_orgs ? inArray(auditEvents.org_id, f.visible_orgs) : undefined,
    f.start !== undefined ? gte(auditEvents.created_at, f.start) : undefined,
    f.end !== undefined ? lt(auditEvents.created_at, f.end) : undefined,
  )
}

export function sqliteAudit(deps: SqliteDeps): AuditStore {
  const { db } = deps
  return {
    async record(ctx, events, now) {
      writeTx(db, (tx) => appendAudit(tx, ctx, events, now))
    },

    async page(filter, query) {
      return pageRows<AuditEventRow>(db, auditEvents, auditWhere(filter), query)
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
