import type { CatalogEntryRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import { notFound } from '../../lib/errors'
import type { ModelObject } from './model'
import type { CatalogueState } from './view'
import { modelListBody, selectableEntries, selectableModel } from './view'

// Which entries a user may select (docs/api.md §4 Models, rule 7 and rule 10): enabled, and public or
// private to one of the user's orgs; a superadmin sees every enabled entry. One predicate, in
// catalogue/view.ts, serves GET /v1/models and the batch validator's `unsupported_model` check.

/**
 * The enabled entries the user `userId` may select, by id (unknown user: none). The validator
 * reads them once per batch and looks each line's model up in memory.
 */
export async function visibleEntriesOf(
  deps: Deps & CatalogueState,
  userId: string,
): Promise<Map<string, CatalogEntryRow>> {
  const user = await deps.store.accounts.findUserById(userId)
  if (!user) return new Map()
  return selectableEntries(deps, user)
}

/** GET /v1/models (docs/api.md §4), serialized once per visibility class and kept (catalogue/view.ts). */
export function listModels(deps: Deps & CatalogueState, principal: UserPrincipal): Promise<string> {
  return modelListBody(deps, principal.user)
}

export async function getModel(
  deps: Deps & CatalogueState,
  principal: UserPrincipal,
  id: string,
): Promise<ModelObject> {
  const model = await selectableModel(deps, principal.user, id)
  // Hidden, disabled and another org's entries are all simply "not found" (docs/api.md §0).
  if (!model) throw notFound('model_not_found', `No model "${id}" in the catalogue`, 'id')
  return model
}
