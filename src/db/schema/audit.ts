import { index, integer, sqliteTable, text } from 'drizzle-orm/sqlite-core'

// The audit log (docs/api.md §17): one append-only row per security-relevant change, written in
// the change's own transaction (src/store/*/audit.ts). No foreign keys: an entry outlives the user,
// key, org or file it names. The only delete is AUDIT_RETENTION_DAYS' expiry (the retention pass).

export const auditEvents = sqliteTable(
  'audit_events',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(),
    created_at: integer().notNull(),
    // Who: `user` (a JWT), `personal_key`, `worker_key`, `system` or `anonymous` (src/domain/audit.ts).
    actor_kind: text().notNull(),
    // The user or key id; null for the system and anonymous callers.
    actor_id: text(),
    // The user behind the actor: the JWT's user, a personal key's owner (the `actor` filter by user id).
    actor_user_id: text(),
    ip: text(),
    user_agent: text(),
    // A dotted name of src/domain/audit.ts AUDIT_ACTIONS, e.g. `key.personal.created`.
    action: text().notNull(),
    target_kind: text().notNull(),
    target_id: text(),
    org_id: text(),
    // What changed, never a secret (src/domain/audit.ts checkDetails).
    details: text({ mode: 'json' }).notNull().$type<Record<string, unknown>>(),
  },
  // One index per filter of GET /v1/audit-events, each ending in seq (newest first); created_at
  // also serves the time range and the retention's expiry.
  (t) => [
    index('audit_events_org').on(t.org_id, t.seq),
    index('audit_events_actor').on(t.actor_id, t.seq),
    index('audit_events_actor_user').on(t.actor_user_id, t.seq),
    index('audit_events_target').on(t.target_id, t.seq),
    index('audit_events_action').on(t.action, t.seq),
    index('audit_events_created').on(t.created_at),
  ],
)

export type AuditEventRow = typeof auditEvents.$inferSelect
export type NewAuditEventRow = typeof auditEvents.$inferInsert
