import { and, eq, inArray, isNull, or } from 'drizzle-orm'
import { type CatalogEntryRow, catalogEntries, memberships } from '../../db/schema'
import type { Deps } from '../../deps'

// The one rule deciding which catalogue entry a user may name in `body.model` (SPEC §4 Batches
// "Validation rejects a model not in the catalogue with unsupported_model"; API.md §6): an entry
// qualifies when it is enabled and public (org_id null) or private to one of the user's orgs.
// The catalogue workstream exports the same function from its service; the lead reconciles.

export function findVisibleEntry(deps: Pick<Deps, 'db'>, userId: string, id: string): CatalogEntryRow | null {
  const orgs = deps.db
    .select({ id: memberships.org_id })
    .from(memberships)
    .where(eq(memberships.user_id, userId))
  const row = deps.db
    .select()
    .from(catalogEntries)
    .where(
      and(
        eq(catalogEntries.id, id),
        eq(catalogEntries.enabled, true),
        or(isNull(catalogEntries.org_id), inArray(catalogEntries.org_id, orgs)),
      ),
    )
    .get()
  return row ?? null
}
