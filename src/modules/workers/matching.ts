import type { Deps } from '../../deps'
import type { HostedModel } from '../../domain/inventory'
import { digestOrNull } from '../../lib/digest'
import type { CatalogueRows } from '../../store/catalogue'
import type { WorkerHead } from '../../store/fleet'
import { isOnline, onlineCutoff } from './liveness'

// THE matching predicate (docs/api.md §7 Poll rules 1–6, docs/api.md §7 "hosts", serving profiles, artifact
// files). Poll, pool capacity, pull_models and `available` in GET /v1/models all decide "can this
// worker serve this entry?" through matchEntry() below; nothing else re-implements it.

export interface Profile {
  runtime: string
  runtime_model_id: string
  params: Record<string, unknown>
}

export interface CatalogueEntry {
  id: string
  renamed_from: string | null
  enabled: boolean
  org_id: string | null
  display_name: string
  parameter_size: string | null
  vram_gb: number | null
  size_gb: number | null
  /** Normalized (64 lowercase hex) or null. */
  digest: string | null
  /** Explicit profiles in manifest order, or the one derived from runtime/runtime_model_id. */
  profiles: Profile[]
  /** Normalized sha256 of every artifact file (empty for single-file entries). */
  artifact_sha256: string[]
}

/** What the predicate judges before it looks at a worker's models. */
export interface WorkerFit {
  org_id: string
  heartbeated: boolean
  vram_total_gb: number | null
}

export interface WorkerView extends WorkerFit {
  /** Engines of the worker's runtimes. */
  engines: readonly string[]
  models: readonly HostedModel[]
}

export interface Match {
  entry: CatalogueEntry
  profile: Profile
  /** docs/api.md §7 Poll rule 5: the model is already loaded in VRAM on this worker. */
  loaded: boolean
}

/** The part of matchEntry that needs no models: a worker failing it is ruled out unread. */
export function fitsWorker(worker: WorkerFit, entry: CatalogueEntry): boolean {
  if (!entry.enabled) return false
  // Org-private entries (docs/api.md §4 catalogue rule 10) are never run on another org's machines.
  if (entry.org_id !== null && entry.org_id !== worker.org_id) return false
  // docs/api.md §7 Poll rule 2: VRAM fit is judged only once the worker has reported it by heartbeat;
  // a null vram_gb disables the filter.
  if (worker.heartbeated && entry.vram_gb !== null) {
    if (worker.vram_total_gb === null || worker.vram_total_gb < entry.vram_gb) return false
  }
  return true
}

/** Whether `worker` can serve `entry` now, and with which serving profile. */
export function matchEntry(worker: WorkerView, entry: CatalogueEntry): Match | null {
  if (!fitsWorker(worker, entry)) return null
  // docs/api.md §7 Poll rule 6: a worker that never heartbeated only gets what it advertised at registration.
  const hosted = worker.models.filter(
    (m) => (m.configured || m.on_disk || m.loaded) && (worker.heartbeated || m.advertised),
  )
  // docs/api.md §4: every artifact file must be verified present before the artifact counts as present.
  if (entry.artifact_sha256.length > 0) {
    const inventory = new Set(hosted.filter((m) => m.on_disk && m.digest).map((m) => m.digest))
    if (!entry.artifact_sha256.every((sha) => inventory.has(sha))) return null
  }
  let best: Profile | null = null
  let bestRank = -1
  let loaded = false
  for (const profile of entry.profiles) {
    for (const m of hosted) {
      // docs/api.md §7 Poll rule 3: the worker must host the runtime string.
      if (m.name !== profile.runtime_model_id) continue
      // docs/api.md §7 Poll rule 4: same tag with another digest is another artifact.
      if (entry.digest !== null && m.digest !== null && m.digest !== entry.digest) continue
      if (m.loaded) loaded = true
      // docs/api.md §7: the profile whose runtime is the engine hosting the model wins; next, one
      // whose runtime the worker runs; else the first listed.
      const rank = m.runtime === profile.runtime ? 2 : worker.engines.includes(profile.runtime) ? 1 : 0
      if (rank > bestRank) {
        best = profile
        bestRank = rank
      }
    }
  }
  return best ? { entry, profile: best, loaded } : null
}

// ---------------------------------------------------------------------------------------------
// Loading what the predicate reads, through the store (catalogue and fleet parts).

export interface Catalogue {
  entries: CatalogueEntry[]
  byId: Map<string, CatalogueEntry>
  /** docs/api.md §7 Poll rule 1 and §4 catalogue rule 5: `batch.model` by catalogue id, else by an entry's renamed_from. */
  resolve(slug: string): CatalogueEntry | undefined
  /** The stored `batches.model` values that resolve to `entry` (its id, and its old slug). */
  slugsOf(entry: CatalogueEntry): string[]
}

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
  const artifacts = new Map<string, string[]>()
  for (const a of rows.artifacts) {
    const sha = digestOrNull(a.sha256)
    if (!sha) continue
    const list = artifacts.get(a.catalog_id) ?? []
    list.push(sha)
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
    artifact_sha256: artifacts.get(e.id) ?? [],
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

const fitOf = (w: WorkerHead): WorkerFit => ({
  org_id: w.org_id,
  heartbeated: w.last_heartbeat_at !== null,
  vram_total_gb: w.vram_total_gb,
})

/** The predicate's view of one worker, from its stored row and child rows. */
export async function loadWorkerView(deps: Deps, worker: WorkerHead): Promise<WorkerView> {
  return workerView(worker, await deps.store.fleet.workerHosting(worker.id))
}

/** The same view from rows already read (a poll reads the row and the child rows together). */
export const workerView = (
  worker: WorkerHead,
  hosting: Pick<WorkerView, 'engines' | 'models'>,
): WorkerView => ({ ...fitOf(worker), ...hosting })

/** Every entry `worker` can serve now (enabled ones only), best profile chosen. */
export function matchesFor(view: WorkerView, catalogue: Catalogue): Match[] {
  const out: Match[] = []
  for (const entry of catalogue.entries) {
    const m = matchEntry(view, entry)
    if (m) out.push(m)
  }
  return out
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
