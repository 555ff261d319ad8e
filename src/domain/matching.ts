import type { WorkerRow } from '../db/schema'
import {
  type Capability,
  type CapabilityReport,
  effectiveCapabilities,
  runtimeCapabilities,
} from './capabilities'
import type { DownloadableEntry } from './downloads'
import { fitsGpus, profileGpuCount } from './gpu-fit'
import type { HostedModel } from './inventory'

// THE matching predicate (docs/api.md §7 Poll rules 1–7, docs/api.md §7 "hosts", serving profiles, artifact
// files). Poll, pool capacity, pull_models and `available` in GET /v1/models all decide "can this
// worker serve this entry?" through matchEntry() below; nothing else re-implements it. Rule 7 is
// per batch: a match carries what the worker can do with the entry, and the claim takes only the
// batches whose needs that covers (src/domain/capabilities.ts takeableNeeds).

export interface Profile {
  runtime: string
  runtime_model_id: string
  params: Record<string, unknown>
}

export interface CatalogueEntry extends DownloadableEntry {
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
  /** docs/api.md §4: what the model can do (src/domain/capabilities.ts modelCapabilities). */
  capabilities: readonly Capability[]
}

/** What the predicate judges before it looks at a worker's models. */
export interface WorkerFit {
  org_id: string
  heartbeated: boolean
  vram_total_gb: number | null
  /** Each GPU's memory (GB) as the last heartbeat's `gpus` reported it; empty when none did. */
  gpus_gb: readonly number[]
}

export interface WorkerView extends WorkerFit {
  /** Engines of the worker's runtimes. */
  engines: readonly string[]
  /** What each runtime reported it can do, by engine; one absent reported nothing (docs/api.md §7). */
  reported: Readonly<Record<string, CapabilityReport>>
  models: readonly HostedModel[]
}

export interface Match {
  entry: CatalogueEntry
  profile: Profile
  /** docs/api.md §7 Poll rule 5: the model is already loaded in VRAM on this worker. */
  loaded: boolean
  /**
   * docs/api.md §7 Poll rule 7: what this worker can do with the entry — the model's capabilities
   * AND those of the runtime that would run it (engineCapabilities).
   */
  capabilities: readonly Capability[]
}

/**
 * docs/api.md §7 Poll rule 7: what the worker's runtime of `engine` can do (its report, else the
 * engine's defaults). Without a runtime of that engine (or with the engine unknown), only what all
 * of the worker's runtimes can do counts.
 */
export function engineCapabilities(worker: Pick<WorkerView, 'engines' | 'reported'>, engine: string | null) {
  const of = (e: string) => runtimeCapabilities(e, worker.reported[e])
  if (engine !== null && worker.engines.includes(engine)) return of(engine)
  return worker.engines.reduce<readonly Capability[]>(
    (shared, e) => effectiveCapabilities(shared, of(e)),
    worker.engines.length ? of(worker.engines[0]!) : [],
  )
}

/**
 * The part of matchEntry that needs no models: a worker failing it is ruled out unread. Its fit is
 * that of `profile` (the one the worker would run it with), else of the entry's best profile.
 */
export function fitsWorker(worker: WorkerFit, entry: CatalogueEntry, profile?: Profile): boolean {
  if (!entry.enabled) return false
  // Org-private entries (docs/api.md §4 catalogue rule 10) are never run on another org's machines.
  if (entry.org_id !== null && entry.org_id !== worker.org_id) return false
  return fitsVram(worker, entry, profile)
}

/**
 * docs/api.md §7 Poll rule 2: judged only once the worker has reported its VRAM by heartbeat; a null
 * vram_gb disables the filter. With each GPU reported (heartbeat `gpus`), the model's GPU count
 * (gpu-fit.ts profileGpuCount, of `profile`, else of any of its profiles) of them must each hold
 * vram_gb ÷ that count; else the total must hold vram_gb.
 */
function fitsVram(worker: WorkerFit, entry: CatalogueEntry, profile?: Profile): boolean {
  const need = entry.vram_gb
  if (!worker.heartbeated || need === null) return true
  if (worker.gpus_gb.length > 0) {
    const profiles = profile ? [profile] : entry.profiles
    if (profiles.length === 0) return fitsGpus(worker.gpus_gb, need, 1)
    return profiles.some((p) => fitsGpus(worker.gpus_gb, need, profileGpuCount(p.runtime, p.params)))
  }
  return worker.vram_total_gb !== null && worker.vram_total_gb >= need
}

/** Whether `worker` can serve `entry` now, and with which serving profile. */
export function matchEntry(worker: WorkerView, entry: CatalogueEntry): Match | null {
  if (!fitsWorker(worker, entry)) return null
  const match = hostingMatch(worker, entry)
  return match && fitsVram(worker, entry, match.profile) ? match : null
}

/**
 * The model side of matchEntry: whether `worker` holds `entry`'s artifact, whatever its fit
 * (docs/api.md §6 `waiting` tells "hosts it but does not fit" from "hosts it not at all").
 */
export function hostingMatch(worker: WorkerView, entry: CatalogueEntry): Match | null {
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
  /** The engine that would run `best`: the one hosting the model, else the profile's runtime. */
  let engine: string | null = null
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
        engine = m.runtime ?? profile.runtime
      }
    }
  }
  if (!best) return null
  const capabilities = effectiveCapabilities(entry.capabilities, engineCapabilities(worker, engine))
  return { entry, profile: best, loaded, capabilities }
}

/**
 * docs/api.md §7 Poll rule 7: of a batch's `needs`, those `worker` cannot meet with `entry` (what
 * the entry AND the engine hosting it can do); all of them when it does not host the entry.
 */
export function lacking(worker: WorkerView, entry: CatalogueEntry, needs: readonly string[]): string[] {
  if (needs.length === 0) return []
  const can: readonly string[] = hostingMatch(worker, entry)?.capabilities ?? []
  return needs.filter((n) => !can.includes(n))
}

/** The catalogue as the predicate reads it (built by src/modules/workers/matching.ts loadCatalogue). */
export interface Catalogue {
  entries: CatalogueEntry[]
  byId: Map<string, CatalogueEntry>
  /** docs/api.md §7 Poll rule 1 and §4 catalogue rule 5: `batch.model` by catalogue id, else by an entry's renamed_from. */
  resolve(slug: string): CatalogueEntry | undefined
  /** The stored `batches.model` values that resolve to `entry` (its id, and its old slug). */
  slugsOf(entry: CatalogueEntry): string[]
}

/** What the predicate reads of a worker's stored row (the fleet store's WorkerHead has it). */
export type WorkerFacts = Pick<WorkerRow, 'org_id' | 'last_heartbeat_at' | 'vram_total_gb' | 'gpu_memory'>

export const fitOf = (w: WorkerFacts): WorkerFit => ({
  org_id: w.org_id,
  heartbeated: w.last_heartbeat_at !== null,
  vram_total_gb: w.vram_total_gb,
  gpus_gb: (w.gpu_memory ?? []).map((g) => g.memory_total_gb),
})

/** The same view from rows already read (a poll reads the row and the child rows together). */
export const workerView = (
  worker: WorkerFacts,
  hosting: Pick<WorkerView, 'engines' | 'reported' | 'models'>,
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
