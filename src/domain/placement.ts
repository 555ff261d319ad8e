import type { ClaimHead } from './worker-rules'

// docs/api.md §7 "Placement": which model a polling worker takes work of, decided here once for both
// storage engines (ARCHITECTURE.md rule 18). The engine finds the waiting heads (docs/api.md §14) and
// each candidate model's longest-waiting batch inside its claim; this ranks the models; fair share and
// then the oldest batch order the heads within a rank (worker-rules.ts pickClaim).

/**
 * docs/api.md §7 placement, spread rule: a switch must lower the imbalance by this many workers beyond
 * the one it moves, so that a worker that just switched does not switch back while the shares
 * wobble by less than twice this.
 */
export const SWITCH_MARGIN = 0.5

/** What the spread and pays-to-load rules know of one model (catalogue entry) for the polling worker. */
export interface ModelDemand {
  /** Requests waiting: validated batches, and the uncut and requeued shards of split ones. */
  waiting: number
  /** Other online workers with capabilities.loads serving the model now (the polling one excluded). */
  serving: number
  /** Requests per second of those workers, each as measured (docs/api.md §7 model_stats). */
  rate: number
  /** The polling worker's requests per second on the model. */
  ownRate: number
  /** The polling worker's load time of the model, seconds. */
  loadSeconds: number
}

export interface Placement {
  /** PLACEMENT_MAX_WAIT_SECONDS: a model whose longest-waiting batch waited this long is overdue. */
  maxWaitSeconds: number
  /**
   * For a worker with capabilities.loads: the fleet's figures behind the spread and pays-to-load
   * rules. Null for any other worker: after the overdue models, loaded models first (Poll rule 5).
   */
  spread: {
    /** Online workers with capabilities.loads, the polling one included. */
    workers: number
    /** Requests waiting for every model. */
    totalWaiting: number
    /** By model key (catalogue entry id); a model missing here has nothing measured or waiting. */
    demand: ReadonlyMap<string, ModelDemand>
  } | null
  /**
   * The polling worker has a GPU holding no model in use (poll spare_gpu): it can load another
   * model beside the ones it serves, without leaving them.
   */
  spare?: boolean
}

/** A candidate model with waiting work, as it stands for the polling worker now. */
export interface ModelNow {
  key: string
  /** Loaded (or being loaded) on the polling worker. */
  current: boolean
  /** The polling worker holds work of it now (a model loaded and idle there is not busy). */
  busy?: boolean
  /** queued_at of its longest-waiting validated batch; null when none has one. */
  oldestQueuedAt: number | null
}

const NOTHING: ModelDemand = { waiting: 0, serving: 0, rate: 0, ownRate: 0, loadSeconds: 0 }

/**
 * docs/api.md §7 placement: the rank of each model the worker may take now (lower first); a model
 * left out is not taken by this poll.
 *
 * 1. Aging: a model that is overdue (its longest-waiting batch has waited at least maxWaitSeconds)
 *    and that no other worker serves comes before every other, loaded or not; the longest wait
 *    first. A model another worker serves is not starving: more workers join it by rules 3 and 4,
 *    and its overdue batches do not each pull a worker of their own (a load each).
 * 2. A worker without capabilities.loads (spread null): loaded models, then the others (Poll rule 5).
 * 3. A worker with capabilities.loads that has work for a model it serves keeps to it, unless one
 *    model is worth a switch: another worker serves its model too (the last one never leaves a
 *    model's waiting work to nobody), loading the other pays (its waiting requests outlast a load at
 *    the rate it is served — the others serving it, or this worker alone when none does), and either
 *    moving this worker there lowers the imbalance by more than 1 + SWITCH_MARGIN workers, or no
 *    worker serves that model and it cannot wait: its load and its waiting requests at this
 *    worker's rate take at least as long as the fleet stays busy (shares round a rare model down to
 *    no worker; a queue of it still gets one once it can wait no longer) — the most under-served
 *    such model first.
 * 4. Such a worker with no work for the models it serves takes the most under-served model whose
 *    loading pays or that no other worker serves.
 * 5. Such a worker with a spare GPU (the poll's spare_gpu) takes first the models loaded there and
 *    idle (no load at all), then the most under-served other model whose loading pays or that no
 *    other worker serves (loading it leaves nothing, and the GPU would idle otherwise), then the
 *    models it is busy with: first those a copy of which pays on the spare GPU (copyPays), then the
 *    others.
 *
 * A model's share is the workers × its waiting requests ÷ all waiting requests; its excess is the
 * workers serving it minus its share; the imbalance a move from model c to model m lowers is
 * excess(c) − excess(m). The fleet stays busy for the longest time the waiting requests of a model
 * that workers serve keep those workers (÷ their rates, this worker's included when it serves it).
 * A model nobody serves that can wait is not worth pulling a worker away for now: it can start later
 * and still end by then — on the first worker that frees up (rule 4), or on one pulled away once it
 * can wait no longer — with the one load it needs either way, where a worker pulled away now would
 * finish it early and, its own model's work outlasting it, load that again to go back: a load that
 * makes nothing end sooner.
 */
export function rankModels(p: Placement, models: readonly ModelNow[], now: number): Map<string, number> {
  const ranks = new Map<string, number>()
  let next = 0
  const s = p.spread
  const demand = (m: ModelNow) => s?.demand.get(m.key) ?? NOTHING
  const overdue = models
    .filter(
      (m) =>
        !m.current &&
        m.oldestQueuedAt !== null &&
        now - m.oldestQueuedAt >= p.maxWaitSeconds &&
        demand(m).serving === 0,
    )
    .sort((a, b) => a.oldestQueuedAt! - b.oldestQueuedAt!)
  for (const m of overdue) ranks.set(m.key, next++)
  const rest = models.filter((m) => !ranks.has(m.key))
  const current = rest.filter((m) => m.current)
  const others = rest.filter((m) => !m.current)
  if (!s) {
    for (const m of current) ranks.set(m.key, next)
    if (current.length) next++
    for (const m of others) ranks.set(m.key, next)
    return ranks
  }
  const share = (m: ModelNow) => (s.totalWaiting > 0 ? (s.workers * demand(m).waiting) / s.totalWaiting : 0)
  const excess = (m: ModelNow) => demand(m).serving + (m.current ? 1 : 0) - share(m)
  const pays = (m: ModelNow) => {
    const d = demand(m)
    return d.waiting > (d.serving > 0 ? d.rate : d.ownRate) * d.loadSeconds
  }
  const underServedFirst = (a: ModelNow, b: ModelNow) =>
    excess(a) - excess(b) || (a.oldestQueuedAt ?? now) - (b.oldestQueuedAt ?? now)
  const busyFor = Math.max(
    0,
    ...models.map((m) => {
      const d = demand(m)
      const rate = d.rate + (m.current ? d.ownRate : 0)
      return (m.current || d.serving > 0) && rate > 0 ? d.waiting / rate : 0
    }),
  )
  const cannotWait = (m: ModelNow) => {
    const d = demand(m)
    return d.loadSeconds + d.waiting / d.ownRate >= busyFor
  }
  if (current.length && p.spare) {
    const idle = current.filter((m) => !m.busy)
    for (const m of idle) ranks.set(m.key, next)
    if (idle.length) next++
    for (const m of others.filter((m) => pays(m) || demand(m).serving === 0).sort(underServedFirst))
      ranks.set(m.key, next++)
    const busy = current.filter((m) => m.busy)
    const copies = busy.filter((m) => copyPays(p, m.key))
    for (const m of copies) ranks.set(m.key, next)
    if (copies.length) next++
    for (const m of busy.filter((m) => !copies.includes(m))) ranks.set(m.key, next)
    return ranks
  }
  if (current.length) {
    const from = current.reduce((a, b) => (excess(b) > excess(a) ? b : a))
    // The last worker serving a model with work waiting does not leave it: that work would wait
    // for aging, and cost a load again.
    const [target] =
      demand(from).serving > 0
        ? others
            .filter(
              (m) =>
                pays(m) &&
                (excess(from) - excess(m) >= 1 + SWITCH_MARGIN || (demand(m).serving === 0 && cannotWait(m))),
            )
            .sort(underServedFirst)
        : []
    if (target) ranks.set(target.key, next++)
    for (const m of current) ranks.set(m.key, next)
    return ranks
  }
  for (const m of others.filter((m) => pays(m) || demand(m).serving === 0).sort(underServedFirst))
    ranks.set(m.key, next++)
  return ranks
}

/**
 * docs/api.md §7 placement rule 5: whether one more copy of model `key`, which the polling worker
 * is busy with, pays on its spare GPU — the model's waiting requests outlast a load at the rate it
 * is served now (the other workers serving it, and the polling worker's own rate). The claim says
 * so to the worker (the job's `copy`), which may then run the model there too.
 */
export function copyPays(p: Placement, key: string): boolean {
  const d = p.spread?.demand.get(key)
  if (!p.spare || !d) return false
  return d.waiting > (d.rate + d.ownRate) * d.loadSeconds
}

/** A head as the engine found it, with the candidate model it belongs to. */
export interface PlacedHead extends ClaimHead {
  candidate: { model: string; key?: string; loaded: boolean; busy?: boolean }
}

/**
 * docs/api.md §7 placement: the candidate models (batches.model slugs) whose longest wait the ranking
 * of `heads` reads, so the engine probes only those: a model loaded on the worker is never overdue
 * nor ordered by its wait (rankModels), and when a worker without capabilities.loads has a single
 * model to take, no rank decides anything. A poll's cost then does not grow with its checks. Given
 * the candidates instead of the heads, a superset: the waits of models without heads go unread.
 */
export function slugsToAge(
  p: Placement | undefined,
  heads: readonly Pick<PlacedHead, 'candidate'>[],
): string[] {
  if (!p) return []
  const current = new Map<string, boolean>()
  for (const h of heads) {
    const key = h.candidate.key ?? h.candidate.model
    current.set(key, (current.get(key) ?? false) || h.candidate.loaded)
  }
  if (!p.spread && current.size <= 1) return []
  const slugs = heads.filter((h) => !current.get(h.candidate.key ?? h.candidate.model))
  return [...new Set(slugs.map((h) => h.candidate.model))]
}

/**
 * The engine's half of the placement, the same on both: ranks its heads in place by rankModels (a
 * model's longest wait is its slugs' longest, `oldest` by batches.model slug) and returns the heads
 * the worker may take. Without a placement (PLACEMENT=loaded_first) the ranks are Poll rule 5's.
 */
export function placeHeads<H extends PlacedHead>(
  p: Placement | undefined,
  heads: H[],
  oldest: ReadonlyMap<string, number | null>,
  now: number,
): H[] {
  for (const h of heads) h.rank = h.candidate.loaded ? 0 : 1
  if (!p) return heads
  const byKey = new Map<string, ModelNow>()
  for (const h of heads) {
    const key = h.candidate.key ?? h.candidate.model
    const at = oldest.get(h.candidate.model) ?? null
    const m = byKey.get(key) ?? { key, current: false, oldestQueuedAt: null }
    m.current ||= h.candidate.loaded
    m.busy ||= h.candidate.busy === true
    if (at !== null && (m.oldestQueuedAt === null || at < m.oldestQueuedAt)) m.oldestQueuedAt = at
    byKey.set(key, m)
  }
  const ranks = rankModels(p, [...byKey.values()], now)
  return heads.filter((h) => {
    const rank = ranks.get(h.candidate.key ?? h.candidate.model)
    if (rank === undefined) return false
    h.rank = rank
    return true
  })
}
