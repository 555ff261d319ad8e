import type { CatalogEntryRow } from '../../db/schema'
import type { Deps } from '../../deps'
import { notFound } from '../../lib/errors'
import type { UserPrincipal } from '../auth/credentials'
import { servableCatalogIds } from '../workers/matching'
import { type ModelObject, toModelObject } from './model'

// Which entries a user may select (SPEC §4 Models, rule 7 and rule 10): enabled, and public or
// private to one of the user's orgs; a superadmin sees every enabled entry. One predicate, in the
// store's catalogue part, serves GET /v1/models and the batch validator's `unsupported_model` check.

/**
 * The enabled entries the user `userId` may select, by id (unknown user: none). The validator
 * reads them once per batch and looks each line's model up in memory.
 */
export async function visibleEntriesOf(deps: Deps, userId: string): Promise<Map<string, CatalogEntryRow>> {
  const user = await deps.store.accounts.findUserById(userId)
  if (!user) return new Map()
  return new Map((await deps.store.catalogue.visibleEntries(user)).map((e) => [e.id, e]))
}

export async function listModels(
  deps: Deps,
  principal: UserPrincipal,
): Promise<{ object: 'list'; data: ModelObject[] }> {
  const rows = await deps.store.catalogue.visibleEntries(principal.user)
  const servable = await servableCatalogIds(deps)
  return { object: 'list', data: rows.map((r) => toModelObject(r, servable.has(r.id))) }
}

export async function getModel(deps: Deps, principal: UserPrincipal, id: string): Promise<ModelObject> {
  const row = await deps.store.catalogue.visibleEntry(principal.user, id)
  // Hidden, disabled and another org's entries are all simply "not found" (API.md §0).
  if (!row) throw notFound('model_not_found', `No model "${id}" in the catalogue`, 'id')
  return toModelObject(row, (await servableCatalogIds(deps)).has(row.id))
}
