import { t } from 'elysia'
import type { AuditEventRow } from '../../db/schema'
import { AUDIT_ACTION_NAMES, AUDIT_TARGET_KINDS, type AuditActorKind } from '../../domain/audit'
import { PageQuery } from '../../lib/pagination'

// docs/api.md §17: GET /v1/audit-events. Filters are taken as strings and checked by
// src/domain/audit.ts auditFilter, so a bad one is a 400 naming its parameter.

const text = (description: string, maxLength = 128) => t.Optional(t.String({ maxLength, description }))

export const AuditModel = {
  query: t.Object(
    {
      ...PageQuery,
      actor: text(
        "Who acted: a user id (by JWT or that user's personal key), a key id, `system` or `anonymous`",
      ),
      action: text('An action (`key.personal.created`) or a family of them (`key.*`, `org.member.*`)'),
      target_kind: text(`What the entry is about: ${AUDIT_TARGET_KINDS.join(', ')}`, 16),
      target_id: text('The id of what the entry is about'),
      org_id: text('The organization (owners and admins: one of theirs)'),
      start: text('Created at or after (Unix seconds)', 32),
      end: text('Created before (Unix seconds)', 32),
      format: text(
        '`jsonl` streams every matching entry as JSON lines (as does `Accept: application/x-ndjson`)',
        8,
      ),
    },
    { additionalProperties: false },
  ),
}
export type AuditQueryParams = typeof AuditModel.query.static

const nullable = <T extends Parameters<typeof t.Union>[0][number]>(s: T) => t.Union([s, t.Null()])

export const AuditEventObject = t.Object({
  id: t.String(),
  object: t.Literal('audit_event'),
  created_at: t.Integer(),
  action: t.String({ description: AUDIT_ACTION_NAMES.join(', ') }),
  actor: t.Object({
    kind: t.Union(
      (['user', 'personal_key', 'worker_key', 'system', 'anonymous'] satisfies AuditActorKind[]).map((k) =>
        t.Literal(k),
      ),
    ),
    id: nullable(t.String()),
    user_id: nullable(t.String()),
  }),
  ip: nullable(t.String()),
  user_agent: nullable(t.String()),
  target: t.Object({ kind: t.String(), id: nullable(t.String()) }),
  org_id: nullable(t.String()),
  details: t.Record(t.String(), t.Unknown()),
})
export type AuditEventObject = typeof AuditEventObject.static

export const AuditEventList = t.Object({
  object: t.Literal('list'),
  data: t.Array(AuditEventObject),
  first_id: nullable(t.String()),
  last_id: nullable(t.String()),
  has_more: t.Boolean(),
})

export const toAuditObject = (r: AuditEventRow): AuditEventObject => ({
  id: r.id,
  object: 'audit_event',
  created_at: r.created_at,
  action: r.action,
  actor: { kind: r.actor_kind as AuditActorKind, id: r.actor_id, user_id: r.actor_user_id },
  ip: r.ip,
  user_agent: r.user_agent,
  target: { kind: r.target_kind, id: r.target_id },
  org_id: r.org_id,
  details: r.details,
})
