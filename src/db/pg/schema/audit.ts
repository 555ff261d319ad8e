import { bigint, bigserial, index, pgTable, text } from 'drizzle-orm/pg-core'
import { jsonb } from '../jsonb'

// The audit log (docs/api.md §17; see src/db/schema/audit.ts).
export const auditEvents = pgTable(
  'audit_events',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    created_at: bigint({ mode: 'number' }).notNull(),
    actor_kind: text().notNull(),
    actor_id: text(),
    actor_user_id: text(),
    ip: text(),
    user_agent: text(),
    action: text().notNull(),
    target_kind: text().notNull(),
    target_id: text(),
    org_id: text(),
    details: jsonb().notNull().$type<Record<string, unknown>>(),
  },
  (t) => [
    index('audit_events_org').on(t.org_id, t.seq),
    index('audit_events_actor').on(t.actor_id, t.seq),
    index('audit_events_actor_user').on(t.actor_user_id, t.seq),
    index('audit_events_target').on(t.target_id, t.seq),
    index('audit_events_action').on(t.action, t.seq),
    index('audit_events_created').on(t.created_at),
  ],
)
