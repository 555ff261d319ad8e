import { expect } from 'bun:test'
import type { AuditEventObject } from '../../src/modules/audit/model'
import type { TestApp, TestServer } from './app'

// Reading the audit log (docs/api.md §17) the way its readers do: GET /v1/audit-events.

type Target = Pick<TestApp, 'req'> | Pick<TestServer, 'req'>

/** Every entry within `filters` that `reader` may see, newest first (all pages). */
export async function auditEntries(
  t: Target,
  reader: { token: string },
  filters: Record<string, string> = {},
): Promise<AuditEventObject[]> {
  const out: AuditEventObject[] = []
  let after: string | undefined
  for (;;) {
    const query = new URLSearchParams({ ...filters, limit: '100', ...(after ? { after } : {}) })
    const res = await t.req('GET', `/v1/audit-events?${query}`, { token: reader.token })
    expect(res.status).toBe(200)
    out.push(...res.body.data)
    if (!res.body.has_more) return out
    after = res.body.last_id
  }
}

/** The one entry of `action` about `targetId`: there must be exactly one. */
export async function oneEntry(
  t: Target,
  reader: { token: string },
  action: string,
  targetId: string | null,
  filters: Record<string, string> = {},
): Promise<AuditEventObject> {
  const entries = await auditEntries(t, reader, {
    action,
    ...(targetId === null ? {} : { target_id: targetId }),
    ...filters,
  })
  expect(entries.map((e) => [e.action, e.target.id])).toEqual([[action, targetId]])
  return entries[0]!
}
