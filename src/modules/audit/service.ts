import type { Deps } from '../../deps'
import { type AuditFilter, auditFilter } from '../../domain/audit'
import type { UserPrincipal } from '../../domain/principal'
import { badRequest } from '../../lib/errors'
import { type PageParams, toPage } from '../../lib/pagination'
import { requireOrgRole } from '../orgs/access'
import { type AuditQueryParams, toAuditObject } from './model'

// docs/api.md §17: reading the audit log. A superadmin reads every entry; anyone else the entries of
// the organizations they own or administer (the org-role check of orgs/access.ts: another org is a
// 404, a viewer's a 403). Entries are never changed or deleted here.

/** What the caller may read of `filter`: a superadmin all of it, others their orgs' part. */
async function visible(deps: Deps, principal: UserPrincipal, filter: AuditFilter): Promise<AuditFilter> {
  if (principal.user.platform_role === 'superadmin') return filter
  if (filter.org_id !== undefined) {
    await requireOrgRole(deps, principal, filter.org_id, 'admin')
    return filter
  }
  const orgs = (await deps.store.orgs.listMembershipsOf(principal.user.id))
    .filter((m) => m.role === 'owner' || m.role === 'admin')
    .map((m) => m.org_id)
  return { ...filter, visible_orgs: orgs }
}

/** Whether the caller asked for the JSON lines export (`?format=jsonl` or the Accept header). */
export function wantsJsonl(format: string | undefined, accept: string | null): boolean {
  if (format !== undefined && format !== 'json' && format !== 'jsonl')
    throw badRequest('invalid_value', "Invalid query parameter 'format': json or jsonl", 'format')
  return format === 'jsonl' || (format === undefined && !!accept?.includes('application/x-ndjson'))
}

export async function listAuditEvents(deps: Deps, principal: UserPrincipal, query: AuditQueryParams) {
  const filter = await visible(deps, principal, auditFilter(query))
  const { rows, has_more } = await deps.store.audit.page(filter, query)
  return toPage(rows.map(toAuditObject), has_more)
}

// The export reads the pages of the list, as large as the pager gives them.
const EXPORT_PAGE = 100
const encoder = new TextEncoder()

/**
 * The export (docs/api.md §17): every entry within the filters, newest first, one JSON object per
 * line, read page by page as the client takes them. The first page is read before the answer is
 * sent, so a bad filter or cursor is still a 400.
 */
export async function exportAuditEvents(
  deps: Deps,
  principal: UserPrincipal,
  query: AuditQueryParams,
): Promise<ReadableStream<Uint8Array>> {
  if (query.limit !== undefined)
    throw badRequest(
      'invalid_value',
      "Invalid query parameter 'limit': the JSON lines export streams every matching entry",
      'limit',
    )
  const filter = await visible(deps, principal, auditFilter(query))
  const read = (after: string | undefined) =>
    deps.store.audit.page(filter, { limit: EXPORT_PAGE, after } satisfies PageParams)
  let next: ReturnType<typeof read> | null = read(query.after)
  await next
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { rows, has_more } = await next!
      if (rows.length)
        controller.enqueue(encoder.encode(rows.map((r) => `${JSON.stringify(toAuditObject(r))}\n`).join('')))
      next = has_more ? read(rows.at(-1)!.id) : null
      if (!next) controller.close()
    },
  })
}
