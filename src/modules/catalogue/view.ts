import type { CatalogEntryRow, UserRow } from '../../db/schema'
import type { Deps } from '../../deps'
import { log } from '../../lib/logger'
import { CATALOGUE_REREAD_MS } from '../../store/catalogue'
import { loadCatalogue, onlineFleet, servableCatalogIds } from '../workers/matching'
import { toModelObject } from './model'

// What GET /v1/models and the validator choose from, kept in memory per server (deps.catalogueView)
// so that a request costs the same whatever the fleet's size: the enabled entries, which of them
// some online worker can serve now, and the serialized answers. Dropped by the events that change
// them — a catalogue write, a worker registering, a heartbeat that changes an inventory or a fit, a
// worker coming back — here and, through the signals bridge (src/services/signals.ts), on every
// other instance; and by time: an online worker falling silent (read-time liveness) ends the view.

/**
 * The longest a view is kept: a signal from another instance that never arrived (docs/api.md §12: a
 * signal is a hint) delays a change by at most this — the same safety net as the engine's
 * catalogue rows (CATALOGUE_REREAD_MS), so one lost signal costs one bound, not two.
 */
export const VIEW_MAX_AGE_SECONDS = CATALOGUE_REREAD_MS / 1000
/** Visibility classes whose answers are kept (each user's private orgs make one). */
const MAX_KEPT_BODIES = 1_000

export interface EnabledCatalogue {
  /** Every enabled entry, in byte order of id. */
  rows: CatalogEntryRow[]
  byId: Map<string, CatalogEntryRow>
  /** Orgs owning an enabled private entry: only these memberships change what a user sees. */
  privateOrgs: Set<string>
  until: number
}

interface ModelsNow {
  catalogue: EnabledCatalogue
  /** docs/api.md §4 Models `available`: the entries some online worker can serve (servableCatalogIds). */
  servable: Set<string>
  /** Unix seconds: the view is used while the clock is before this. */
  until: number
  /** GET /v1/models bodies, serialized, per visibility class. */
  bodies: Map<string, string>
}

/** What changed: the catalogue itself, or only which entries the fleet can serve. */
export type ModelsScope = 'catalogue' | 'fleet'

/** One kept value, used while the clock is before its `until`; made once however many wait. */
class Kept<T extends { until: number }> {
  #value?: Promise<T>

  drop() {
    this.#value = undefined
  }

  async get(deps: Pick<Deps, 'clock'>, make: () => Promise<T>): Promise<T> {
    const current = this.#value
    const kept = current && (await current)
    if (kept && deps.clock.now() < kept.until) return kept
    if (this.#value === current) {
      const made = make()
      this.#value = made
      // A failed read (the database away) is not kept: the next caller tries again.
      made.catch(() => {
        if (this.#value === made) this.#value = undefined
      })
    }
    return this.#value!
  }
}

export class CatalogueView {
  readonly catalogue = new Kept<EnabledCatalogue>()
  readonly models = new Kept<ModelsNow>()

  drop(scope: ModelsScope) {
    if (scope === 'catalogue') this.catalogue.drop()
    this.models.drop()
  }
}

/** This server's catalogue view, made by src/compose.ts (ARCHITECTURE.md rule 2). */
export interface CatalogueState {
  /** GET /v1/models and the validator's catalogue, kept until something changes them. */
  catalogueView: CatalogueView
}

/** Forgets what `scope` covers here and on the other instances (src/services/signals.ts). */
export function modelsChanged(deps: Deps & CatalogueState, scope: ModelsScope) {
  deps.catalogueView.drop(scope)
  deps.store.signals
    .publish({ kind: 'models_changed', scope })
    .catch((e) => log.warn('models signal not sent', { error: e }))
}

export function enabledCatalogue(deps: Deps & CatalogueState): Promise<EnabledCatalogue> {
  return deps.catalogueView.catalogue.get(deps, async () => {
    const until = deps.clock.now() + VIEW_MAX_AGE_SECONDS
    const rows = await deps.store.catalogue.enabledEntries()
    const privateOrgs = new Set<string>()
    for (const r of rows) if (r.org_id !== null) privateOrgs.add(r.org_id)
    return { rows, byId: new Map(rows.map((r) => [r.id, r])), privateOrgs, until }
  })
}

function modelsNow(deps: Deps & CatalogueState): Promise<ModelsNow> {
  return deps.catalogueView.models.get(deps, async () => {
    const now = deps.clock.now()
    const [catalogue, predicate, fleet] = await Promise.all([
      enabledCatalogue(deps),
      loadCatalogue(deps),
      onlineFleet(deps),
    ])
    const servable = await servableCatalogIds(deps, predicate, fleet)
    // Read-time liveness (workers/liveness.ts): a worker seen at `t` is silent from
    // t + HEARTBEAT_TIMEOUT_SECONDS on, and may take an entry's availability with it.
    let until = Math.min(catalogue.until, now + VIEW_MAX_AGE_SECONDS)
    for (const w of fleet.heads.values())
      until = Math.min(until, w.last_seen_at + deps.config.HEARTBEAT_TIMEOUT_SECONDS)
    return { catalogue, servable, until, bodies: new Map() }
  })
}

type Viewer = Pick<UserRow, 'id' | 'platform_role'>

/**
 * docs/api.md §4 catalogue rules 7 and 10: a user may select an enabled entry that is public or private to
 * one of the user's orgs; a superadmin, every enabled entry. `key` names the visibility class.
 */
async function visibilityOf(deps: Deps & CatalogueState, viewer: Viewer, catalogue: EnabledCatalogue) {
  if (viewer.platform_role === 'superadmin') return { key: '*', sees: (_: CatalogEntryRow) => true }
  const mine =
    catalogue.privateOrgs.size === 0
      ? []
      : (await deps.store.fleet.orgIdsOf(viewer.id)).filter((o) => catalogue.privateOrgs.has(o)).sort()
  const orgs = new Set(mine)
  return { key: mine.join(' '), sees: (r: CatalogEntryRow) => r.org_id === null || orgs.has(r.org_id) }
}

/** The entries `viewer` may select, by id (the validator's `unsupported_model` check). */
export async function selectableEntries(
  deps: Deps & CatalogueState,
  viewer: Viewer,
): Promise<Map<string, CatalogEntryRow>> {
  const catalogue = await enabledCatalogue(deps)
  const { sees } = await visibilityOf(deps, viewer, catalogue)
  return new Map(catalogue.rows.filter(sees).map((r) => [r.id, r]))
}

/** GET /v1/models, serialized: the entries `viewer` may select with `available` now. */
export async function modelListBody(deps: Deps & CatalogueState, viewer: Viewer): Promise<string> {
  const models = await modelsNow(deps)
  const { key, sees } = await visibilityOf(deps, viewer, models.catalogue)
  let body = models.bodies.get(key)
  if (body === undefined) {
    const data = models.catalogue.rows.filter(sees).map((r) => toModelObject(r, models.servable.has(r.id)))
    body = JSON.stringify({ object: 'list', data })
    if (models.bodies.size >= MAX_KEPT_BODIES) models.bodies.clear()
    models.bodies.set(key, body)
  }
  return body
}

/** GET /v1/models/{id}: the entry when `viewer` may select it, with `available` now. */
export async function selectableModel(deps: Deps & CatalogueState, viewer: Viewer, id: string) {
  const models = await modelsNow(deps)
  const row = models.catalogue.byId.get(id)
  if (!row || !(await visibilityOf(deps, viewer, models.catalogue)).sees(row)) return undefined
  return toModelObject(row, models.servable.has(row.id))
}
