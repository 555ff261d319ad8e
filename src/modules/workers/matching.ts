import type { Deps } from '../../deps'
import { modelCapabilities } from '../../domain/capabilities'
import type { DownloadFile } from '../../domain/downloads'
import {
  type Catalogue,
  type CatalogueEntry,
  fitOf,
  fitsWorker,
  matchEntry,
  type Profile,
  type WorkerView,
  workerView,
} from '../../domain/matching'
import { digestOrNull } from '../../lib/digest'
import type { CatalogueRows } from '../../store/catalogue'
import type { WorkerHead } from '../../store/fleet'
import { isOnline, onlineCutoff } from './liveness'

// Loading what the matching predicate (src/domain/matching.ts) reads, through the store (catalogue
// and fleet parts), and the questions about the online fleet that it answers.

// What each poll derives from the catalogue rows, by rows object: the store hands back the same
// object until the catalogue changes (CatalogueStore.readCatalogue), so this is built once per
// change. Keyed by the rows, not by Deps: derived data, gone with the rows it was built from.
const built = new WeakMap<CatalogueRows, Catalogue>()

export async function loadCatalogue(deps: Deps): Promise<Catalogue> {
  const rows = await deps.store.catalogue.readCatalogue()
  let catalogue = built.get(rows)
  if (!catalogue) {
    catalogue = buildCatalogue(rows)
    built.set(rows, catalogue)
  }
  return catalogue
}

function buildCatalogue(rows: CatalogueRows): Catalogue {
  const profiles = new Map<string, Profile[]>()
  for (const p of rows.profiles) {
    const list = profiles.get(p.catalog_id) ?? []
    list.push({ runtime: p.runtime, runtime_model_id: p.runtime_model_id, params: p.params ?? {} })
    profiles.set(p.catalog_id, list)
  }
  const artifacts = new Map<string, DownloadFile[]>()
  for (const a of rows.artifacts) {
    const sha256 = digestOrNull(a.sha256)
    if (!sha256) continue
    const list = artifacts.get(a.catalog_id) ?? []
    list.push({ path: a.path, sha256, size_bytes: a.size_bytes })
    artifacts.set(a.catalog_id, list)
  }
  const entries: CatalogueEntry[] = rows.entries.map((e) => ({
    id: e.id,
    renamed_from: e.renamed_from,
    enabled: e.enabled,
    org_id: e.org_id,
    display_name: e.display_name,
    parameter_size: e.parameter_size,
    vram_gb: e.vram_gb,
    size_gb: e.size_gb,
    digest: digestOrNull(e.digest),
    // docs/api.md §4: an entry without explicit profiles gets one derived from runtime/runtime_model_id.
    profiles:
      profiles.get(e.id) ??
      (e.runtime && e.runtime_model_id
        ? [{ runtime: e.runtime, runtime_model_id: e.runtime_model_id, params: {} }]
        : []),
    artifact_sha256: (artifacts.get(e.id) ?? []).map((f) => f.sha256),
    capabilities: modelCapabilities(e),
    // What a download of the entry fetches (src/domain/downloads.ts).
    artifact_files: artifacts.get(e.id) ?? [],
    source_type: e.source_type,
    source_ref: e.source_ref,
    source_revision: e.source_revision,
  }))
  const byId = new Map(entries.map((e) => [e.id, e]))
  const byOldSlug = new Map<string, CatalogueEntry>()
  for (const e of entries)
    if (e.renamed_from && !byOldSlug.has(e.renamed_from)) byOldSlug.set(e.renamed_from, e)
  const resolve = (slug: string) => byId.get(slug) ?? byOldSlug.get(slug)
  return {
    entries,
    byId,
    resolve,
    slugsOf: (entry) =>
      entry.renamed_from && resolve(entry.renamed_from) === entry
        ? [entry.id, entry.renamed_from]
        : [entry.id],
  }
}

/** The predicate's view of one worker, from its stored row and child rows. */
export async function loadWorkerView(deps: Deps, worker: WorkerHead): Promise<WorkerView> {
  return workerView(worker, await deps.store.fleet.workerHosting(worker.id))
}

/** The online workers, read once for a series of "does any online worker serve X?" questions. */
export interface OnlineFleet {
  heads: Map<string, WorkerHead>
  /** Who hosts each name; names not asked before are read in one call, then remembered. */
  hostsOf(names: readonly string[]): Promise<Map<string, string[]>>
  /** One worker's full view, read on first use: most hosts are ruled out by fitsWorker first. */
  view(id: string): Promise<WorkerView>
}

export async function onlineFleet(deps: Deps): Promise<OnlineFleet> {
  return fleetOf(deps, await deps.store.fleet.onlineWorkers(onlineCutoff(deps)))
}

/** The online workers among those hosting any of `names`. */
async function hostsFleet(deps: Deps, names: string[]): Promise<OnlineFleet> {
  const ids = new Set([...(await deps.store.fleet.hostsOf(names)).values()].flat())
  const heads: WorkerHead[] = []
  for (const id of ids) {
    const w = await deps.store.fleet.findWorker(id)
    if (w && isOnline(deps, w)) heads.push(w)
  }
  return fleetOf(deps, heads)
}

function fleetOf(deps: Deps, online: WorkerHead[]): OnlineFleet {
  const heads = new Map<string, WorkerHead>()
  for (const w of online) heads.set(w.id, w)
  const hosts = new Map<string, string[]>()
  const views = new Map<string, Promise<WorkerView>>()
  return {
    heads,
    async hostsOf(names) {
      const unread = names.filter((n) => !hosts.has(n))
      if (unread.length) for (const [n, ids] of await deps.store.fleet.hostsOf(unread)) hosts.set(n, ids)
      return hosts
    },
    view(id) {
      let view = views.get(id)
      if (!view) {
        view = loadWorkerView(deps, heads.get(id)!)
        views.set(id, view)
      }
      return view
    },
  }
}

const namesOf = (entry: CatalogueEntry) => [...new Set(entry.profiles.map((p) => p.runtime_model_id))]

/** Whether some online worker can serve `entry` now (stops at the first that can). */
export async function someOnlineWorkerServes(deps: Deps, entry: CatalogueEntry, fleet?: OnlineFleet) {
  if (!entry.enabled) return false
  // Asked alone (a heartbeat's pull_models check): only the workers hosting the entry's names are
  // read, so the cost follows the hosts of that model, never the size of the fleet.
  fleet ??= await hostsFleet(deps, namesOf(entry))
  const names = namesOf(entry)
  const hosts = await fleet.hostsOf(names)
  for (const name of names) {
    for (const id of hosts.get(name) ?? []) {
      const head = fleet.heads.get(id)
      if (!head || !fitsWorker(fitOf(head), entry)) continue
      if (matchEntry(await fleet.view(id), entry)) return true
    }
  }
  return false
}

/**
 * Ids of the enabled entries at least one online worker can serve now. The one source of
 * "servable": poll-side code, pool capacity's models_servable and `available` in GET /v1/models.
 */
export async function servableCatalogIds(
  deps: Deps,
  catalogue?: Catalogue,
  fleet?: OnlineFleet,
): Promise<Set<string>> {
  catalogue ??= await loadCatalogue(deps)
  fleet ??= await onlineFleet(deps)
  const enabled = catalogue.entries.filter((e) => e.enabled)
  // Every name's hosts in one read; then each entry stops at its first fitting host.
  await fleet.hostsOf([...new Set(enabled.flatMap(namesOf))])
  const out = new Set<string>()
  for (const entry of enabled) if (await someOnlineWorkerServes(deps, entry, fleet)) out.add(entry.id)
  return out
}
