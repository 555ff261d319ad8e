import { and, asc, eq, gte, inArray, lt, type SQL } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { AuditEventRow } from '../../db/schema'
import {
  type AuditContext,
  type AuditEvent,
  type AuditFilter,
  auditExpired,
  auditRow,
} from '../../domain/audit'
import type { AuditStore } from '../audit'
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

export function postgresAudit(db: PgDb): AuditStore {
  return {
    async record(ctx, events, now) {
      await db.transaction((tx) => appendAudit(tx, ctx, events, now))
    },

    async page(filter, query) {
      return pageRows<AuditEventRow>(db, auditEvents, auditWhere(filter), query)
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
