import type { ModelStat, WorkerRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { Catalogue, CatalogueEntry } from '../../domain/matching'
import type { ModelDemand, Placement } from '../../domain/placement'
import type { PlacementWorker } from '../../store/fleet'
import type { WaitingWork } from '../../store/queue'
import { onlineCutoff } from './liveness'

// docs/api.md §7 "Placement": the figures the placement rule (src/domain/placement.ts) weighs for a
// worker with capabilities.loads — the work waiting per model, the workers serving each, their
// measured rates and load times. A poll's cost must not grow with the queue or the fleet, so each
// server reads them at most once a second (QueueStore.waitingWork, FleetStore.placementFleet) and
// keeps what it did since on top: a batch it validated adds its requests to the model's waiting work,
// and a claim takes its requests off and puts its worker on that model at once, so the next poll, a
// moment later, does not send a second worker after the same work. What the engine needs fresh (the
// heads, each model's longest wait) it reads inside the claim itself; whether an idle worker is
// polling (so serving what it has loaded) comes from this server's polls (waiters.ts).

/** What this server last read of the queue and the fleet. */
interface Snapshot {
  /** Clock seconds when it was read, and real milliseconds (performance.now()). */
  at: number
  atMs: number
  /** By batches.model slug. */
  waiting: Map<string, WaitingWork>
  fleet: PlacementWorker[]
}

/**
 * A claim this server made, or a batch it validated (workerId null), counted until the next read
 * sees it (docs/api.md §7 placement).
 */
interface LocalChange {
  seq: number
  workerId: string | null
  model: string
  /** Requests taken off the model's waiting work (a claim), or added to it (negative: validated). */
  requests: number
}

/** The placement's view of one server (one per server, made by src/compose.ts). */
export class PlacementView {
  private snapshot: Snapshot | null = null
  private reading: Promise<Snapshot> | null = null
  private changes: LocalChange[] = []
  private seq = 0

  /** A claim this server just made: `requests` of `model` now run on `workerId`. */
  claimed(workerId: string, model: string, requests: number) {
    this.record({ workerId, model, requests })
  }

  /** A batch this server just validated: `requests` more of `model` wait. */
  validated(model: string, requests: number) {
    this.record({ workerId: null, model, requests: -requests })
  }

  private record(change: Omit<LocalChange, 'seq'>) {
    this.seq++
    // A change made before the next read begins is in that read: with no snapshot kept, or one that
    // read replaces (a second old), there is nothing to add it to, and nothing piles up while no
    // worker that loads models polls.
    if (!this.reading && (!this.snapshot || performance.now() - this.snapshot.atMs >= 1000)) {
      this.snapshot = null
      this.changes = []
      return
    }
    this.changes.push({ seq: this.seq, ...change })
  }

  /**
   * The snapshot, read again when it is a second old or more — by the clock, or in real time (a
   * clock that tests hold still must not keep it forever) — with what changed here since.
   */
  async read(deps: Deps): Promise<{ snapshot: Snapshot; changes: readonly LocalChange[] }> {
    const now = deps.clock.now()
    const s = this.snapshot
    if (!s || now - s.at >= 1 || performance.now() - s.atMs >= 1000) {
      this.reading ??= this.refresh(deps, now).finally(() => {
        this.reading = null
      })
      await this.reading
    }
    return { snapshot: this.snapshot!, changes: this.changes }
  }

  private async refresh(deps: Deps, now: number): Promise<Snapshot> {
    const mark = this.seq
    const atMs = performance.now()
    const [waiting, fleet] = await Promise.all([
      deps.store.queue.waitingWork(),
      deps.store.fleet.placementFleet(onlineCutoff(deps)),
    ])
    this.snapshot = {
      at: now,
      atMs,
      waiting: new Map(waiting.map((w) => [w.model, w])),
      fleet,
    }
    // What changed before the read began is in it now.
    this.changes = this.changes.filter((c) => c.seq > mark)
    return this.snapshot
  }
}

/** docs/api.md §7 placement: this server's view, beside its held polls (waiters.ts PollState). */
export interface PlacementState {
  placement: PlacementView
}

const namesOf = (entry: CatalogueEntry) => new Set(entry.profiles.map((p) => p.runtime_model_id))

/** The worker's measurement of `entry` (docs/api.md §7 model_stats), by any of its runtime names. */
const statOf = (stats: readonly ModelStat[], names: ReadonlySet<string>) =>
  stats.find((s) => names.has(s.name))

const mean = (values: (number | undefined)[]) => {
  const known = values.filter((v): v is number => v !== undefined)
  return known.length ? known.reduce((a, b) => a + b, 0) / known.length : undefined
}

/**
 * docs/api.md §7 placement: what the claim of `worker` ranks its candidate models by (ClaimRequest
 * placement), and the models (batches.model slugs) of the work it holds now; undefined under
 * PLACEMENT=loaded_first.
 */
export async function placementFor(
  deps: Deps & PlacementState,
  worker: Pick<WorkerRow, 'id' | 'loads' | 'model_stats' | 'loading_models'>,
  entries: readonly CatalogueEntry[],
  catalogue: Catalogue,
  /** Whether a worker has a poll under way on this server (waiters.ts PollWaiters.isPolling). */
  isPolling: (workerId: string) => boolean,
): Promise<{ placement: Placement; held: ReadonlySet<string> } | undefined> {
  const config = deps.config
  if (config.PLACEMENT === 'loaded_first') return undefined
  const maxWaitSeconds = config.PLACEMENT_MAX_WAIT_SECONDS
  if (!worker.loads) return { placement: { maxWaitSeconds, spread: null }, held: new Set() }
  const { snapshot, changes } = await deps.placement.read(deps)
  // The waiting work per slug, with what this server validated and claimed since the read.
  const waiting = new Map([...snapshot.waiting].map(([slug, w]) => [slug, w.requests]))
  const held = new Map(snapshot.fleet.map((w) => [w.id, [...w.held]]))
  for (const c of changes) {
    waiting.set(c.model, Math.max(0, (waiting.get(c.model) ?? 0) - c.requests))
    if (c.workerId !== null) held.get(c.workerId)?.push(c.model)
  }
  const totalWaiting = [...waiting.values()].reduce((a, b) => a + b, 0)
  const others = snapshot.fleet.filter((w) => w.id !== worker.id)
  const everyone = [...others.map((w) => w.model_stats), worker.model_stats]
  const demand = new Map<string, ModelDemand>()
  for (const entry of entries) {
    const names = namesOf(entry)
    const slugs = catalogue.slugsOf(entry)
    // The fleet's measurement, for a worker that has none of its own yet.
    const meanRate = mean(everyone.map((s) => statOf(s, names)?.requests_per_second))
    const meanLoad = mean(everyone.map((s) => statOf(s, names)?.load_seconds))
    const rateOf = (stats: readonly ModelStat[]) =>
      statOf(stats, names)?.requests_per_second ?? meanRate ?? config.PLACEMENT_DEFAULT_REQUESTS_PER_SECOND
    // A worker holding work serves the models of that work; one holding none, what it has loaded or
    // is loading while it is polling here (alive and asking for work: a batch of that model is its to
    // take; one that is gone, or polls elsewhere, does not keep the model's work from others).
    const serving = others.filter((w) => {
      const mine = held.get(w.id)!
      return mine.length
        ? mine.some((m) => slugs.includes(m))
        : isPolling(w.id) && [...w.loaded_models, ...w.loading_models].some((n) => names.has(n))
    })
    demand.set(entry.id, {
      waiting: slugs.reduce((sum, slug) => sum + (waiting.get(slug) ?? 0), 0),
      serving: serving.length,
      rate: serving.reduce((sum, w) => sum + rateOf(w.model_stats), 0),
      ownRate: rateOf(worker.model_stats),
      loadSeconds:
        statOf(worker.model_stats, names)?.load_seconds ?? meanLoad ?? config.PLACEMENT_DEFAULT_LOAD_SECONDS,
    })
  }
  return {
    placement: { maxWaitSeconds, spread: { workers: others.length + 1, totalWaiting, demand } },
    held: new Set(held.get(worker.id) ?? claims(changes, worker.id)),
  }
}

/** The models of the claims this server made for a worker the last read did not see online. */
const claims = (changes: readonly LocalChange[], workerId: string) =>
  changes.filter((c) => c.workerId === workerId).map((c) => c.model)
