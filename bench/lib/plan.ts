// The plan that knew the arrivals, for bench/placement.ts: an offline, clairvoyant schedule of the
// same batches on the same fleet, to weigh the live placement's loads against (bench/README.md).
//
// The fleet as the stand-in routers run it, idealised: each worker serves one model at a time at
// `rate` requests per second (slots ÷ latency), a load takes `loadS` seconds and nothing runs
// meanwhile, a batch runs whole on one worker (batches here are never split), no polls, no
// heartbeats. A schedule is what each worker loads first (or nothing) and up to two later switches
// (a worker, the model it moves to, the time it moves); given one, the batches are placed by list
// scheduling: a worker free at t takes the earliest-arrived batch of its model that has arrived,
// else idles until the next one arrives or its switch is due; a switch is made when the batch
// running at its time ends. Its loads are the models loaded (first ones and switches), its makespan
// the last batch's end. The search tries every first assignment and every one or two switches on a
// grid of times (a fortieth of the horizon: ~0.5 s here), so the plan is the best of those, not a
// proven optimum: a finer grid or more switches could do a little better.

export interface PlanBatch {
  model: string
  requests: number
  /** When it is created, ms after the start. */
  atMs: number
}

export interface PlanFleet {
  workers: number
  /** Requests per second of one worker on any model. */
  rate: number
  loadS: number
}

interface Switch {
  worker: number
  /** Its index among the models; −1 for nothing loaded. */
  model: number
  atS: number
}

/** The best makespan found with each number of loads (index: loads; Infinity: none found). */
export interface Plans {
  byLoads: number[]
  /** How each best schedule runs, by loads: one line per worker. */
  how: string[][]
}

/** The makespan of one schedule, seconds (Infinity when a batch is never run). */
function simulate(
  queues: readonly (readonly { requests: number; atS: number }[])[],
  fleet: PlanFleet,
  first: readonly number[],
  switches: readonly Switch[],
): number {
  const next = queues.map(() => 0)
  const model = [...first]
  const at = first.map((m) => (m < 0 ? 0 : fleet.loadS))
  // A worker's switches in time order (the search gives them so).
  const pending: Switch[][] = first.map(() => [])
  for (const s of switches) pending[s.worker]!.push(s)
  let makespan = 0
  for (;;) {
    let w = 0
    for (let o = 1; o < at.length; o++) if (at[o]! < at[w]!) w = o
    const t = at[w]!
    if (t === Number.POSITIVE_INFINITY) break
    const due = pending[w]![0]
    if (due && due.atS <= t) {
      pending[w]!.shift()
      model[w] = due.model
      at[w] = t + fleet.loadS
      continue
    }
    const m = model[w]!
    const batch = m < 0 ? undefined : queues[m]![next[m]!]
    if (!batch) at[w] = due ? due.atS : Number.POSITIVE_INFINITY
    else if (batch.atS <= t) {
      next[m]!++
      at[w] = t + batch.requests / fleet.rate
      if (at[w]! > makespan) makespan = at[w]!
    } else at[w] = due ? Math.min(due.atS, batch.atS) : batch.atS
  }
  return queues.every((q, m) => next[m] === q.length) ? makespan : Number.POSITIVE_INFINITY
}

/** Every multiset of `n` picks from `options`, as sorted arrays. */
function multisets<T>(options: readonly T[], n: number, from = 0): T[][] {
  if (n === 0) return [[]]
  const out: T[][] = []
  for (let i = from; i < options.length; i++)
    for (const rest of multisets(options, n - 1, i)) out.push([options[i]!, ...rest])
  return out
}

/** The best schedule with each number of loads, up to every worker loading once and two switches. */
export function clairvoyantPlans(batches: readonly PlanBatch[], fleet: PlanFleet): Plans {
  const models = [...new Set(batches.map((b) => b.model))].sort()
  const queues = models.map((m) =>
    batches
      .filter((b) => b.model === m)
      .map((b) => ({ requests: b.requests, atS: b.atMs / 1000 }))
      .sort((a, b) => a.atS - b.atS),
  )
  // The horizon: the last arrival, a load and the whole fleet's work, more than any plan needs.
  const total = batches.reduce((n, b) => n + b.requests, 0)
  const last = Math.max(...batches.map((b) => b.atMs / 1000))
  const horizon = last + fleet.loadS + total / fleet.rate / fleet.workers
  const grid = Array.from({ length: 41 }, (_, i) => (i * horizon) / 40)
  const byLoads: number[] = Array(fleet.workers + 3).fill(Number.POSITIVE_INFINITY)
  const how: string[][] = byLoads.map(() => [])
  const name = (m: number) => models[m] ?? 'nothing'
  const describe = (first: readonly number[], switches: readonly Switch[]) =>
    first.map((m, i) =>
      [
        name(m),
        ...switches
          .filter((s) => s.worker === i)
          .sort((a, b) => a.atS - b.atS)
          .map((s) => `${name(s.model)} at ${s.atS.toFixed(1)} s`),
      ].join(' → '),
    )
  const consider = (first: readonly number[], switches: readonly Switch[]) => {
    const loads = first.filter((m) => m >= 0).length + switches.length
    const makespan = simulate(queues, fleet, first, switches)
    if (makespan < byLoads[loads]!) {
      byLoads[loads] = makespan
      how[loads] = describe(first, switches)
    }
  }
  const indexes = models.map((_, m) => m)
  for (const first of multisets([...indexes, -1], fleet.workers)) {
    const moves: Switch[] = first.flatMap((_, worker) =>
      indexes.flatMap((model) => grid.map((atS) => ({ worker, model, atS }))),
    )
    // Workers that start alike are alike: the first switch goes to the first of them.
    const firstOfKind = (s: Switch) => first.indexOf(first[s.worker]!) === s.worker
    consider(first, [])
    for (const [i, a] of moves.entries()) {
      if (!firstOfKind(a)) continue
      if (a.model !== first[a.worker]) consider(first, [a])
      for (const b of moves.slice(i + 1)) {
        const [x, y] = b.atS < a.atS ? [b, a] : [a, b]
        // Each switch moves its worker to another model than the one it leaves.
        const moved =
          x.worker !== y.worker
            ? x.model !== first[x.worker] && y.model !== first[y.worker]
            : x.atS < y.atS && x.model !== first[x.worker] && y.model !== x.model
        if (moved) consider(first, [x, y])
      }
    }
  }
  return { byLoads, how }
}
