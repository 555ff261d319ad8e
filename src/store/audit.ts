import type { AuditEventRow } from '../db/schema'
import type { AuditContext, AuditEvent, AuditFilter } from '../domain/audit'
import type { PageParams, RowsPage } from '../lib/pagination'

// The audit log (docs/api.md §17). Entries of a change are written by the store function that makes
// the change, in its transaction (each engine's appendAudit); this part holds what stands alone:
// an entry with no change (a sign-in, a refused one), the reading, and the expiry.

export interface AuditStore {
  /** Entries with no change of their own (a sign-in, a failed sign-in), in one transaction. */
  record(ctx: AuditContext, events: AuditEvent[], now: number): Promise<void>
  /** GET /v1/audit-events: entries within `filter`, newest first (docs/api.md §0 paging). */
  page(filter: AuditFilter, query: PageParams): Promise<RowsPage<AuditEventRow>>
  /**
   * The retention pass (AUDIT_RETENTION_DAYS): deletes up to `limit` entries created before
   * `before`, oldest first, and writes one `audit.expired` entry saying so in the same transaction.
   * Returns how many it deleted.
   */
  expire(before: number, limit: number, now: number, audit: AuditContext): Promise<number>
}
