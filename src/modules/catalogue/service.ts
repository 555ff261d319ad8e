import { and, asc, eq, inArray, isNull, or, type SQL } from 'drizzle-orm'
import { type CatalogEntryRow, catalogEntries, memberships, type UserRow, users } from '../../db/schema'
import type { Deps } from '../../deps'
import { notFound } from '../../lib/errors'
import type { UserPrincipal } from '../auth/credentials'
import { servableCatalogIds } from '../workers/matching'
import { type ModelObject, toModelObject } from './model'

// Which entries a user may select (SPEC §4 Models, rule 7 and rule 10): enabled, and public or
// private to one of the user's orgs; a superadmin sees every enabled entry. One predicate serves
// GET /v1/models and the batch validator's `unsupported_model` check.

type Who = Pick<UserRow, 'id' | 'platform_role'>

function visibleTo(deps: Deps, who: Who): SQL {
  const enabled = eq(catalogEntries.enabled, true)
  if (who.platform_role === 'superadmin') return enabled
  const myOrgs = deps.db
    .select({ org_id: memberships.org_id })
    .from(memberships)
    .where(eq(memberships.user_id, who.id))
  return and(enabled, or(isNull(catalogEntries.org_id), inArray(catalogEntries.org_id, myOrgs)))!
}

/** The enabled entry `id` as the user `userId` may see it, or undefined (unknown, hidden, or not theirs). */
export function findVisibleEntry(deps: Deps, userId: string, id: string): CatalogEntryRow | undefined {
  const who = deps.db
    .select({ id: users.id, platform_role: users.platform_role })
    .from(users)
    .where(eq(users.id, userId))
    .get()
  if (!who) return undefined
  return visibleEntry(deps, who, id)
}

const visibleEntry = (deps: Deps, who: Who, id: string) =>
  deps.db
    .select()
    .from(catalogEntries)
    .where(and(eq(catalogEntries.id, id), visibleTo(deps, who)))
    .get()

export function listModels(deps: Deps, principal: UserPrincipal): { object: 'list'; data: ModelObject[] } {
  const rows = deps.db
    .select()
    .from(catalogEntries)
    .where(visibleTo(deps, principal.user))
    .orderBy(asc(catalogEntries.id))
    .all()
  const servable = servableCatalogIds(deps)
  return { object: 'list', data: rows.map((r) => toModelObject(r, servable.has(r.id))) }
}

export function getModel(deps: Deps, principal: UserPrincipal, id: string): ModelObject {
  const row = visibleEntry(deps, principal.user, id)
  // Hidden, disabled and another org's entries are all simply "not found" (API.md §0).
  if (!row) throw notFound('model_not_found', `No model "${id}" in the catalogue`, 'id')
  return toModelObject(row, servableCatalogIds(deps).has(row.id))
}
