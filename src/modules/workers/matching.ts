import { and, asc, eq, gt, sql } from 'drizzle-orm'
import { preparedOnce } from '../../db/prepared'
import {
  artifactFiles,
  catalogEntries,
  servingProfiles,
  type WorkerRow,
  workerModels,
  workerRuntimes,
  workers,
} from '../../db/schema'
import type { Deps } from '../../deps'
import { digestOrNull } from '../../lib/digest'

// THE matching predicate (SPEC §4 Poll rules 1–6, API.md §7 "hosts", serving profiles, artifact
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

export interface HostedModel {
  name: string
  runtime: string | null
  digest: string | null
  loaded: boolean
  advertised: boolean
  configured: boolean
  on_disk: boolean
}

export interface WorkerView {
  org_id: string
  heartbeated: boolean
  vram_total_gb: number | null
  /** Engines of the worker's runtimes. */
  engines: readonly string[]
  models: readonly HostedModel[]
}

export interface Match {
  entry: CatalogueEntry
  profile: Profile
  /** SPEC Poll rule 5: the model is already loaded in VRAM on this worker. */
  loaded: boolean
}

/** Whether `worker` can serve `entry` now, and with which serving profile. */
export function matchEntry(worker: WorkerView, entry: CatalogueEntry): Match | null {
  if (!entry.enabled) return null
  // Org-private entries (SPEC §2 rule 10) are never run on another org's machines.
  if (entry.org_id !== null && entry.org_id !== worker.org_id) return null
  // SPEC Poll rule 2: VRAM fit is judged only once the worker has reported it by heartbeat;
  // a null vram_gb disables the filter.
  if (worker.heartbeated && entry.vram_gb !== null) {
    if (worker.vram_total_gb === null || worker.vram_total_gb < entry.vram_gb) return null
  }
  // SPEC Poll rule 6: a worker that never heartbeated only gets what it advertised at registration.
  const hosted = worker.models.filter(
    (m) => (m.configured || m.on_disk || m.loaded) && (worker.heartbeated || m.advertised),
  )
  // SPEC §2: every artifact file must be verified present before the artifact counts as present.
  if (entry.artifact_sha256.length > 0) {
    const inventory = new Set(hosted.filter((m) => m.on_disk && m.digest).map((m) => m.digest))
    if (!entry.artifact_sha256.every((sha) => inventory.has(sha))) return null
  }
  let best: Profile | null = null
  let bestRank = -1
  let loaded = false
  for (const profile of entry.profiles) {
    for (const m of hosted) {
      // SPEC Poll rule 3: the worker must host the runtime string.
      if (m.name !== profile.runtime_model_id) continue
      // SPEC Poll rule 4: same tag with another digest is another artifact.
      if (entry.digest !== null && m.digest !== null && m.digest !== entry.digest) continue
      if (m.loaded) loaded = true
      // API.md §7: the profile whose runtime is the engine hosting the model wins; next, one
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
// Loading what the predicate reads. Prepared once per database: poll and heartbeat run these.

function prepare(db: Deps['db']) {
  return {
    entries: db
      .select({
        id: catalogEntries.id,
        renamed_from: catalogEntries.renamed_from,
        enabled: catalogEntries.enabled,
        org_id: catalogEntries.org_id,
        display_name: catalogEntries.display_name,
        parameter_size: catalogEntries.parameter_size,
        vram_gb: catalogEntries.vram_gb,
        size_gb: catalogEntries.size_gb,
        digest: catalogEntries.digest,
        runtime: catalogEntries.runtime,
        runtime_model_id: catalogEntries.runtime_model_id,
      })
      .from(catalogEntries)
      .orderBy(asc(catalogEntries.seq))
      .prepare(),
    profiles: db
      .select({
        catalog_id: servingProfiles.catalog_id,
        runtime: servingProfiles.runtime,
        runtime_model_id: servingProfiles.runtime_model_id,
        params: servingProfiles.params,
      })
      .from(servingProfiles)
      .orderBy(asc(servingProfiles.seq))
      .prepare(),
    artifacts: db
      .select({ catalog_id: artifactFiles.catalog_id, sha256: artifactFiles.sha256 })
      .from(artifactFiles)
      .prepare(),
    workerById: db
      .select()
      .from(workers)
      .where(eq(workers.id, sql.placeholder('id')))
      .prepare(),
    engines: db
      .select({ engine: workerRuntimes.engine })
      .from(workerRuntimes)
      .where(eq(workerRuntimes.worker_id, sql.placeholder('id')))
      .prepare(),
    models: db
      .select({
        name: workerModels.name,
        runtime: workerModels.runtime,
        digest: workerModels.digest,
        loaded: workerModels.loaded,
        advertised: workerModels.advertised,
        configured: workerModels.configured,
        on_disk: workerModels.on_disk,
      })
      .from(workerModels)
      .where(eq(workerModels.worker_id, sql.placeholder('id')))
      .prepare(),
    onlineWorkers: db
      .select({
        id: workers.id,
        org_id: workers.org_id,
        last_heartbeat_at: workers.last_heartbeat_at,
        vram_total_gb: workers.vram_total_gb,
      })
      .from(workers)
      .where(and(eq(workers.status, 'online'), gt(workers.last_seen_at, sql.placeholder('cutoff'))))
      .prepare(),
    // Index-only on worker_models_name_idx (name, worker_id).
    hostsNamed: db
      .select({ worker_id: workerModels.worker_id })
      .from(workerModels)
      .where(eq(workerModels.name, sql.placeholder('name')))
      .prepare(),
  }
}

export const matchingStatements = preparedOnce(prepare)

export interface Catalogue {
  entries: CatalogueEntry[]
  byId: Map<string, CatalogueEntry>
  /** SPEC Poll rule 1 and §2 rule 5: `batch.model` by catalogue id, else by an entry's renamed_from. */
  resolve(slug: string): CatalogueEntry | undefined
  /** The stored `batches.model` values that resolve to `entry` (its id, and its old slug). */
  slugsOf(entry: CatalogueEntry): string[]
}

export function loadCatalogue(deps: Deps): Catalogue {
  const s = matchingStatements(deps)
  const profiles = new Map<string, Profile[]>()
  for (const p of s.profiles.all()) {
    const list = profiles.get(p.catalog_id) ?? []
    list.push({ runtime: p.runtime, runtime_model_id: p.runtime_model_id, params: p.params ?? {} })
    profiles.set(p.catalog_id, list)
  }
  const artifacts = new Map<string, string[]>()
  for (const a of s.artifacts.all()) {
    const sha = digestOrNull(a.sha256)
    if (!sha) continue
    const list = artifacts.get(a.catalog_id) ?? []
    list.push(sha)
    artifacts.set(a.catalog_id, list)
  }
  const entries: CatalogueEntry[] = s.entries.all().map((e) => ({
    id: e.id,
    renamed_from: e.renamed_from,
    enabled: e.enabled,
    org_id: e.org_id,
    display_name: e.display_name,
    parameter_size: e.parameter_size,
    vram_gb: e.vram_gb,
    size_gb: e.size_gb,
    digest: digestOrNull(e.digest),
    // SPEC §2: an entry without explicit profiles gets one derived from runtime/runtime_model_id.
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

/** The predicate's view of one worker, from its stored row and child rows. */
export function loadWorkerView(
  deps: Deps,
  worker: Pick<WorkerRow, 'id' | 'org_id' | 'last_heartbeat_at' | 'vram_total_gb'>,
): WorkerView {
  const s = matchingStatements(deps)
  let engines: string[] | undefined
  let models: HostedModel[] | undefined
  // Child rows are read on first use: the predicate rules a worker out on VRAM before it looks
  // at models, so scanning many unfit hosts stays cheap.
  return {
    org_id: worker.org_id,
    heartbeated: worker.last_heartbeat_at !== null,
    vram_total_gb: worker.vram_total_gb,
    get engines() {
      engines ??= s.engines.all({ id: worker.id }).map((r) => r.engine)
      return engines
    },
    get models() {
      models ??= s.models.all({ id: worker.id })
      return models
    },
  }
}

/** Read-time liveness (API.md §7): stored online AND seen within HEARTBEAT_TIMEOUT_SECONDS. */
export const onlineCutoff = (deps: Deps) => deps.clock.now() - deps.config.HEARTBEAT_TIMEOUT_SECONDS
export const isOnline = (deps: Deps, w: Pick<WorkerRow, 'status' | 'last_seen_at'>) =>
  w.status === 'online' && w.last_seen_at > onlineCutoff(deps)

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
  views: Map<string, WorkerView>
  hostsOf(name: string): string[]
}

export function onlineFleet(deps: Deps): OnlineFleet {
  const s = matchingStatements(deps)
  const views = new Map<string, WorkerView>()
  for (const w of s.onlineWorkers.all({ cutoff: onlineCutoff(deps) }))
    views.set(w.id, loadWorkerView(deps, w))
  return { views, hostsOf: (name) => s.hostsNamed.all({ name }).map((r) => r.worker_id) }
}

/** Whether some online worker can serve `entry` now (stops at the first that can). */
export function someOnlineWorkerServes(
  deps: Deps,
  entry: CatalogueEntry,
  fleet: OnlineFleet = onlineFleet(deps),
) {
  if (!entry.enabled) return false
  for (const name of new Set(entry.profiles.map((p) => p.runtime_model_id))) {
    for (const id of fleet.hostsOf(name)) {
      const view = fleet.views.get(id)
      if (view && matchEntry(view, entry)) return true
    }
  }
  return false
}

/**
 * Ids of the enabled entries at least one online worker can serve now. The one source of
 * "servable": poll-side code, pool capacity's models_servable and `available` in GET /v1/models.
 */
export function servableCatalogIds(deps: Deps, catalogue: Catalogue = loadCatalogue(deps)): Set<string> {
  const fleet = onlineFleet(deps)
  const out = new Set<string>()
  for (const entry of catalogue.entries) if (someOnlineWorkerServes(deps, entry, fleet)) out.add(entry.id)
  return out
}
