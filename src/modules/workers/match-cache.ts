import type { WorkerRow } from '../../db/schema'
import type { Deps } from '../../deps'
import { takeableNeeds } from '../../domain/capabilities'
import { type Catalogue, fitOf, type Match, matchesFor, workerView } from '../../domain/matching'
import type { WorkerPrincipal } from '../../domain/principal'
import type { WorkerHosting } from '../../store/fleet'
import type { HeadKey } from '../../store/queue'
import { loadCatalogue } from './matching'
import { ownWorkerWithHosting } from './ownership'

// What a poll derives from its worker's hosting and the catalogue (docs/api.md §7 Poll rules 1–7):
// the entries the worker can serve and, per batch model, what its claim may take of it. That changes
// only with a registration or a new inventory (the worker row's hosting_seq), a first heartbeat or
// another VRAM total (the row's fit), or the catalogue; so each server keeps it per worker and the
// row every poll reads anyway says whether it still holds — on any instance, whoever changed it (the
// table is the truth). A poll's cost then does not grow with what it checks: the matching, the
// capabilities a claim may take and the hosting read are paid once per change, not per poll.

/** One batch model (`batches.model` slug) the worker can serve: a claim's candidate, but for `loaded`. */
export interface Servable {
  model: string
  match: Match
  /** The entry's runtime model names (docs/api.md §16: guided sizing counts the workers hosting one). */
  names: string[]
  /** docs/api.md §7 Poll rule 7: the stored needs the worker may take of it (takeableNeeds). */
  needs: string[]
  /** The catalogue entry (docs/api.md §7 placement ranks an entry's slugs together). */
  key: string
  /** The entry's slugs (this one among them). */
  slugs: string[]
}

export interface WorkerMatches {
  matches: Match[]
  servable: Servable[]
  /** Every (model, needs) pair of `servable`: whose waiting heads its claim reads. */
  keys: HeadKey[]
  /** By slug: what the worker can do with it (the held polls' ServableModels, waiters.ts). */
  capabilities: ReadonlyMap<string, readonly string[]>
}

interface Kept {
  seq: number
  /** The row's capabilities.shards when last read (docs/api.md §16: whether it takes split batches). */
  shards: boolean
  hosting: WorkerHosting
  fit: string
  catalogue: Catalogue
  derived: WorkerMatches
}

/** What the predicate reads of the worker row besides its hosting: domain/matching.ts fitOf, as a key. */
const fitKey = (w: WorkerRow) => JSON.stringify(fitOf(w))

function derive(worker: WorkerRow, hosting: WorkerHosting, catalogue: Catalogue): WorkerMatches {
  const matches = matchesFor(workerView(worker, hosting), catalogue)
  // docs/api.md §7 Poll rule 1 (and §4 catalogue rule 5): stored batches may carry an entry's retired
  // slug. Poll rule 7: of each model, only the batches whose needs the worker's engine meets.
  const servable = matches.flatMap((match) => {
    const names = [...new Set(match.entry.profiles.map((p) => p.runtime_model_id))]
    const needs = takeableNeeds(match.capabilities)
    const slugs = catalogue.slugsOf(match.entry)
    return slugs.map((model) => ({ model, match, names, needs, key: match.entry.id, slugs }))
  })
  return {
    matches,
    servable,
    keys: servable.flatMap((s) => s.needs.map((needs) => ({ model: s.model, needs }))),
    capabilities: new Map(servable.map((s) => [s.model, s.match.capabilities])),
  }
}

/**
 * Workers whose matches a server keeps: the ones that polled it last. A worker past them (one that
 * has not polled for a while, or a fleet this large) is derived again at its next poll, as after a
 * change — what is kept never outgrows this, however many worker ids have polled since the start.
 */
export const MATCH_CACHE_WORKERS = 4096

/** The matches each worker that polled this server had, and what they were derived from (one per server). */
export class MatchCache {
  /** In order of last use (a Map iterates in insertion order): the first is the next to go. */
  private readonly kept = new Map<string, Kept>()

  constructor(private readonly capacity = MATCH_CACHE_WORKERS) {}

  /** Workers kept now (at most the capacity). */
  get size() {
    return this.kept.size
  }

  /** The hosting_seq of what is kept for `workerId` (the poll reads its hosting only if it moved). */
  seqOf(workerId: string): number | undefined {
    return this.kept.get(workerId)?.seq
  }

  /**
   * What is kept for `workerId` as it was last derived, and the row's shards flag then: most polls
   * derive the same, so a poll reads their heads with the row, at a guess (workerMatches).
   */
  last(workerId: string): { derived: WorkerMatches; shards: boolean } | undefined {
    return this.kept.get(workerId)
  }

  /**
   * The worker's matches from its row (just read) and `hosting` (null: not read, the row's
   * hosting_seq being the one kept). Null when the hosting is needed and not kept (another poll of
   * the worker replaced it meanwhile): the caller reads it.
   */
  matches(worker: WorkerRow, hosting: WorkerHosting | null, catalogue: Catalogue): WorkerMatches | null {
    const fit = fitKey(worker)
    const kept = this.kept.get(worker.id)
    const same = kept?.seq === worker.hosting_seq ? kept : undefined
    if (same && same.fit === fit && same.catalogue === catalogue) {
      same.shards = worker.shards
      this.keep(worker.id, same)
      return same.derived
    }
    const current = hosting ?? same?.hosting
    if (!current) return null
    const derived = derive(worker, current, catalogue)
    this.keep(worker.id, {
      seq: worker.hosting_seq,
      shards: worker.shards,
      hosting: current,
      fit,
      catalogue,
      derived,
    })
    return derived
  }

  /** `entry` as the last used; the least recently used goes when there are more than the capacity. */
  private keep(workerId: string, entry: Kept) {
    this.kept.delete(workerId)
    this.kept.set(workerId, entry)
    if (this.kept.size > this.capacity) this.kept.delete(this.kept.keys().next().value!)
  }
}

/** This server's kept matches, made by src/compose.ts (ARCHITECTURE.md rule 2). */
export interface MatchState {
  matchCache: MatchCache
}

/**
 * POST /workers/poll: the key's worker (404/403 otherwise, ownership.ts) and what it can serve now,
 * with the catalogue they were matched against; the hosting is read only when it changed. With
 * `wholeOnly` (a claim follows: docs/api.md §16, whether the worker takes whole batches only, by
 * the row as last read), the waiting heads of what was derived last are read with the row where
 * the engine can (FleetStore.findWorkerWithHosting): `heads` when the poll derived the same and
 * the row agrees, else undefined and the claim reads them.
 */
export async function workerMatches(
  deps: Deps & MatchState,
  principal: WorkerPrincipal,
  workerId: string,
  wholeOnly?: (shards: boolean) => boolean,
) {
  const last = deps.matchCache.last(workerId)
  const ask =
    wholeOnly && last?.derived.keys.length
      ? { keys: last.derived.keys, wholeOnly: wholeOnly(last.shards) }
      : undefined
  const [{ worker, hosting, heads }, catalogue] = await Promise.all([
    ownWorkerWithHosting(deps, principal, workerId, deps.matchCache.seqOf(workerId), ask),
    loadCatalogue(deps),
  ])
  const derived =
    deps.matchCache.matches(worker, hosting, catalogue) ??
    deps.matchCache.matches(worker, await deps.store.fleet.workerHosting(worker.id), catalogue)!
  const same = ask && derived === last?.derived && ask.wholeOnly === wholeOnly!(worker.shards)
  return { worker, catalogue, ...derived, heads: same ? heads : undefined }
}
