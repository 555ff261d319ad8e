import { describe, expect, test } from 'bun:test'
import {
  copyPays,
  type ModelDemand,
  type ModelNow,
  type Placement,
  placeHeads,
  rankModels,
  slugsToAge,
} from '../../src/domain/placement'
import { pickClaim } from '../../src/domain/worker-rules'

// docs/api.md §7 Placement, the rule itself (pure): aging, pays-to-load, the spread and its margin.
// The engines apply it inside their claims (test/store/placement.test.ts, both engines) and the poll
// feeds it the fleet's figures (test/workers/placement.test.ts).

const NOW = 10_000
const MAX_WAIT = 300

/** A worker with capabilities.loads among `workers`, `total` requests waiting in all. */
function loads(workers: number, demand: Record<string, Partial<ModelDemand>>): Placement {
  const full = new Map(
    Object.entries(demand).map(([k, d]) => [
      k,
      { waiting: 0, serving: 0, rate: 0, ownRate: 100, loadSeconds: 3, ...d } satisfies ModelDemand,
    ]),
  )
  const totalWaiting = [...full.values()].reduce((a, d) => a + d.waiting, 0)
  return { maxWaitSeconds: MAX_WAIT, spread: { workers, totalWaiting, demand: full } }
}

const model = (key: string, current = false, waited: number | null = 10): ModelNow => ({
  key,
  current,
  oldestQueuedAt: waited === null ? null : NOW - waited,
})

/** The keys in rank order (a key left out is not taken). */
const order = (ranks: Map<string, number>) => [...ranks].sort((a, b) => a[1] - b[1]).map(([k]) => k)

describe('docs/api.md §7 Placement: rankModels', () => {
  test('aging: an overdue model nobody serves goes first, loaded or not, the longest wait first; a wait just short is not overdue', () => {
    const p = loads(4, {
      a: { waiting: 10_000, serving: 3, rate: 300 },
      b: { waiting: 1 },
      c: { waiting: 1 },
    })
    // The loaded a is served promptly (its batch has just arrived); b and c waited the setting.
    const models = [model('a', true, 0), model('b', false, MAX_WAIT), model('c', false, MAX_WAIT + 50)]
    expect(order(rankModels(p, models, NOW))).toEqual(['c', 'b', 'a'])
    // One second short of the setting: the worker keeps to its loaded model; a tiny b and c do not pay.
    const early = [model('a', true, 0), model('b', false, MAX_WAIT - 1), model('c', false, MAX_WAIT - 1)]
    expect(order(rankModels(p, early, NOW))).toEqual(['a'])
    // A batch with no queued_at (waiting since before the column) never ages.
    expect(order(rankModels(p, [model('a', true, 0), model('b', false, null)], NOW))).toEqual(['a'])
  })

  test('an overdue model another worker serves does not pull this one: its batches wait for their servers', () => {
    const p = loads(4, {
      a: { waiting: 10_000, serving: 2, rate: 200 },
      b: { waiting: 300, serving: 1, rate: 100 },
    })
    expect(order(rankModels(p, [model('a', true, 0), model('b', false, 10 * MAX_WAIT)], NOW))).toEqual(['a'])
    // Once nobody serves b, it goes first.
    const orphaned = loads(4, { a: { waiting: 10_000, serving: 3, rate: 300 }, b: { waiting: 300 } })
    expect(order(rankModels(orphaned, [model('a', true, 0), model('b', false, MAX_WAIT)], NOW))).toEqual([
      'b',
      'a',
    ])
  })

  test('aging holds for a worker without capabilities.loads too; otherwise loaded models first (Poll rule 5)', () => {
    const p: Placement = { maxWaitSeconds: MAX_WAIT, spread: null }
    const ranks = rankModels(p, [model('a', true), model('b'), model('c')], NOW)
    expect(ranks.get('a')).toBeLessThan(ranks.get('b')!)
    expect(ranks.get('b')).toBe(ranks.get('c')!)
    expect(order(rankModels(p, [model('a', true, 0), model('b', false, MAX_WAIT)], NOW))).toEqual(['b', 'a'])
  })

  test('pays to load: a tiny b does not pull a worker off a long a queue; a long b queue does', () => {
    // Two workers on a (this one and another), a worker serves 100 requests/s and loads in 3 s.
    const tiny = loads(2, { a: { waiting: 10_000, serving: 1, rate: 100 }, b: { waiting: 20 } })
    expect(order(rankModels(tiny, [model('a', true), model('b')], NOW))).toEqual(['a'])
    const long = loads(2, { a: { waiting: 10_000, serving: 1, rate: 100 }, b: { waiting: 10_000 } })
    expect(order(rankModels(long, [model('a', true), model('b')], NOW))).toEqual(['b', 'a'])
  })

  test('pays to load alone holds a worker back when the spread calls for a switch: b would not outlast a load', () => {
    // Four workers all on a; a and b each have 200 waiting → b's share is 2 workers, it has none.
    // 200 requests at this worker's 100/s take 2 s, less than its 3 s load: no switch.
    const p = loads(4, { a: { waiting: 200, serving: 3, rate: 300 }, b: { waiting: 200 } })
    expect(order(rankModels(p, [model('a', true), model('b')], NOW))).toEqual(['a'])
    // The same queue with a 1 s load (measured): it pays, and the worker switches.
    const fast = loads(4, { a: { waiting: 200, serving: 3, rate: 300 }, b: { waiting: 200, loadSeconds: 1 } })
    expect(order(rankModels(fast, [model('a', true), model('b')], NOW))).toEqual(['b', 'a'])
  })

  test('a model already served is judged at the rate of those serving it, not this worker alone', () => {
    // b has 1,000 waiting: 10 s for this worker alone, but the 4 workers on it clear it in 2.5 s < 3 s.
    const served = loads(8, {
      a: { waiting: 1_000, serving: 3, rate: 300 },
      b: { waiting: 1_000, serving: 4, rate: 400 },
    })
    expect(rankModels(served, [model('a', true), model('b')], NOW).has('b')).toBe(false)
  })

  test('the spread: a worker switches only when that lowers the imbalance by more than 1.5 workers', () => {
    // 4 workers, 3 of them (this one included) on a, 1 on b; waiting 3:1 → shares 3 and 1: balanced.
    const balanced = loads(4, {
      a: { waiting: 3_000, serving: 2, rate: 200 },
      b: { waiting: 1_000, serving: 1, rate: 100 },
    })
    expect(order(rankModels(balanced, [model('a', true), model('b')], NOW))).toEqual(['a'])
    // Waiting 1:1 → shares 2 and 2; excess a = 3 − 2 = 1, b = 1 − 2 = −1: the move lowers it by 2 ≥ 1.5.
    const skewed = loads(4, {
      a: { waiting: 2_000, serving: 2, rate: 200 },
      b: { waiting: 2_000, serving: 1, rate: 100 },
    })
    expect(order(rankModels(skewed, [model('a', true), model('b')], NOW))).toEqual(['b', 'a'])
    // Waiting 5:3 → shares 2.5 and 1.5: 0.5 − (−0.5) = 1 < 1.5, the worker stays.
    const slight = loads(4, {
      a: { waiting: 2_500, serving: 2, rate: 200 },
      b: { waiting: 1_500, serving: 1, rate: 100 },
    })
    expect(order(rankModels(slight, [model('a', true), model('b')], NOW))).toEqual(['a'])
  })

  test('hysteresis: a worker that just switched does not switch back when the shares wobble', () => {
    // It switched a → b at 1:1 (above). Now it serves b with one other; a has two. The waiting work
    // wobbles to 65:35 (a's share 2.6: the move back would lower the imbalance by 1.2, more than the
    // worker it moves but not by the margin) and to 35:65: it stays on b both times.
    for (const [wa, wb] of [
      [2_600, 1_400],
      [1_400, 2_600],
    ]) {
      const p = loads(4, {
        a: { waiting: wa!, serving: 2, rate: 200 },
        b: { waiting: wb!, serving: 1, rate: 100 },
      })
      expect(order(rankModels(p, [model('a'), model('b', true)], NOW))).toEqual(['b'])
    }
    // A whole worker's move of the shares (3:1 now) brings it back to a.
    const moved = loads(4, {
      a: { waiting: 3_000, serving: 2, rate: 200 },
      b: { waiting: 1_000, serving: 1, rate: 100 },
    })
    expect(order(rankModels(moved, [model('a'), model('b', true)], NOW))).toEqual(['a', 'b'])
  })

  test('a queue of a model nobody serves gets a worker, though its share rounds to none, once it cannot wait — never by orphaning another model', () => {
    // 4 workers on a, whose 2,500 waiting requests keep them busy 6.25 s (400/s); c has 350 waiting:
    // its share is 0.49 of a worker, the move would lower the imbalance by 0.98 only. But its load and
    // work take 3 + 3.5 = 6.5 s, longer than the fleet stays busy: it cannot wait. a keeps three
    // other workers.
    const p = loads(4, { a: { waiting: 2_500, serving: 3, rate: 300 }, c: { waiting: 350 } })
    expect(order(rankModels(p, [model('a', true), model('c')], NOW))).toEqual(['c', 'a'])
    // 250 requests would not outlast the load (though a frees up in 5 s): no switch.
    const small = loads(4, { a: { waiting: 2_000, serving: 3, rate: 300 }, c: { waiting: 250 } })
    expect(order(rankModels(small, [model('a', true), model('c')], NOW))).toEqual(['a'])
    // The only worker on b does not leave b's work to nobody for c.
    const alone = loads(4, {
      a: { waiting: 10_000, serving: 3, rate: 300 },
      b: { waiting: 700 },
      c: { waiting: 700 },
    })
    expect(order(rankModels(alone, [model('a'), model('b', true), model('c')], NOW))).toEqual(['b'])
  })

  test('a late batch of a model nobody serves waits for a worker freeing up while its load and work fit in the time the fleet stays busy; it pulls one once they do not', () => {
    // Four workers settled on a, 4,000 waiting: busy 10 s at 400/s. A late b of 400 requests pays a
    // load (4 s at 100/s, more than 3 s) and nobody serves it, but its load and work (7 s) fit before
    // the fleet frees up: no worker leaves a for it (to load b, and a again to come back).
    const late = loads(4, { a: { waiting: 4_000, serving: 3, rate: 300 }, b: { waiting: 400 } })
    expect(order(rankModels(late, [model('a', true), model('b', false, 1)], NOW))).toEqual(['a'])
    // The first worker with no a work left takes it (rule 4).
    expect(order(rankModels(late, [model('b', false, 1)], NOW))).toEqual(['b'])
    // More of b (900: 3 + 9 = 12 s) — its share 0.73, short of what the spread moves a worker for —
    // or less of a (2,400: 6 s): b cannot wait, and the worker goes now.
    for (const [a, b] of [
      [4_000, 900],
      [2_400, 400],
    ]) {
      const p = loads(4, { a: { waiting: a!, serving: 3, rate: 300 }, b: { waiting: b! } })
      expect(order(rankModels(p, [model('a', true), model('b', false, 1)], NOW))).toEqual(['b', 'a'])
    }
  })

  test('the last worker serving a model does not leave its waiting work, however the shares stand', () => {
    // c's share is 0.1 of a worker and a's 3.9 with two: the move would lower the imbalance by 2.8,
    // but c's 250 requests would wait for nobody (aging, and a load again).
    const p = loads(4, {
      a: { waiting: 10_000, serving: 2, rate: 200 },
      c: { waiting: 250 },
    })
    expect(order(rankModels(p, [model('a'), model('c', true)], NOW))).toEqual(['c'])
    // Its work done (no head of c left), it goes where it is needed.
    expect(order(rankModels(p, [model('a')], NOW))).toEqual(['a'])
  })

  test('of several models worth a switch, the most under-served is the one taken', () => {
    const p = loads(6, {
      a: { waiting: 100, serving: 5, rate: 500 },
      b: { waiting: 2_000, serving: 1, rate: 100 },
      c: { waiting: 3_900 },
    })
    // Shares: a 0.1, b 2, c 3.9; excess a 5.9, b −1, c −3.9: both are worth it, c the more.
    expect(order(rankModels(p, [model('a', true), model('b'), model('c')], NOW))).toEqual(['c', 'a'])
  })

  test('a worker with no work for its model takes the most under-served model that pays or that nobody serves', () => {
    const p = loads(4, {
      a: { waiting: 3_000, serving: 3, rate: 300 },
      b: { waiting: 1_000 },
      // Tiny and served by another: declined.
      c: { waiting: 5, serving: 1, rate: 100 },
      // Tiny but nobody serves it: taken, after the models that pay.
      d: { waiting: 5 },
    })
    expect(order(rankModels(p, [model('a'), model('b'), model('c'), model('d')], NOW))).toEqual([
      'b',
      'd',
      'a',
    ])
  })

  test('waiting work of a model the worker serves but no figures read yet: it keeps to it', () => {
    // The server's figures are at most a second old: a batch validated since is not in them.
    const p = loads(2, {})
    expect(order(rankModels(p, [model('a', true), model('b')], NOW))).toEqual(['a'])
  })
})

/** A head as an engine finds it, of `model` (an entry's slug when `key` names the entry). */
const head = (batch: string, seq: number, model: string, loaded: boolean, key?: string) => ({
  batch_id: batch,
  seq,
  user_id: 'u',
  rank: 0,
  running: 0,
  candidate: { model, loaded, ...(key ? { key } : {}) },
})

describe('docs/api.md §7 Placement: placeHeads (what both engines call)', () => {
  test('without a placement (PLACEMENT=loaded_first) the ranks are Poll rule 5: loaded first, nothing left out', () => {
    const heads = [head('old', 1, 'b', false), head('new', 2, 'a', true)]
    const placed = placeHeads(undefined, heads, new Map(), NOW)
    expect(placed).toHaveLength(2)
    expect(pickClaim(placed)?.batch_id).toBe('new')
  })

  test("an entry's slugs rank together, with the longest wait of any of them; a declined model's heads are left out", () => {
    const p = loads(4, { e: { waiting: 10 }, a: { waiting: 10_000, serving: 3, rate: 300 } })
    const heads = [
      head('a1', 1, 'a', true),
      // Entry e is stored under its id and its retired slug; the old slug's batch waited longest.
      head('e-new', 3, 'e', false, 'e'),
      head('e-old', 2, 'e-retired', false, 'e'),
    ]
    // Not overdue: e is tiny and a has work: only a's head is left.
    const young = new Map([
      ['e', NOW - 5],
      ['e-retired', NOW - 100],
    ])
    expect(
      placeHeads(
        p,
        heads.map((h) => ({ ...h })),
        young,
        NOW,
      ).map((h) => h.batch_id),
    ).toEqual(['a1'])
    // The retired slug's batch is overdue: entry e goes first, both its heads in one rank.
    const old = new Map([
      ['e', NOW - 5],
      ['e-retired', NOW - MAX_WAIT],
    ])
    const placed = placeHeads(
      p,
      heads.map((h) => ({ ...h })),
      old,
      NOW,
    )
    expect(placed.map((h) => [h.batch_id, h.rank])).toEqual([
      ['a1', 1],
      ['e-new', 0],
      ['e-old', 0],
    ])
    expect(pickClaim(placed)?.batch_id).toBe('e-old')
  })
})

describe('docs/api.md §7 Placement: slugsToAge (the longest waits an engine reads)', () => {
  test('a worker without capabilities.loads and one model to take reads no wait; a loaded model’s wait is never read', () => {
    const p: Placement = { maxWaitSeconds: MAX_WAIT, spread: null }
    expect(slugsToAge(p, [head('x', 1, 'a', false), head('y', 2, 'a', false)])).toEqual([])
    expect(slugsToAge(undefined, [head('x', 1, 'a', false), head('y', 2, 'b', false)])).toEqual([])
    expect(slugsToAge(p, [head('x', 1, 'a', true), head('y', 2, 'b', false)])).toEqual(['b'])
    // An entry's two slugs are one model: both are read, or neither.
    expect(slugsToAge(p, [head('x', 1, 'e', false, 'e'), head('y', 2, 'e-old', false, 'e')])).toEqual([])
    expect(
      slugsToAge(p, [
        head('x', 1, 'e', false, 'e'),
        head('y', 2, 'e-old', false, 'e'),
        head('z', 3, 'a', true),
      ]),
    ).toEqual(['e', 'e-old'])
    // With the spread, one model's wait decides whether it is taken at all.
    expect(slugsToAge(loads(2, { a: { waiting: 1, serving: 1 } }), [head('x', 1, 'a', false)])).toEqual(['a'])
  })

  test('the heads placed are the same whether every wait is read or only those slugsToAge names', () => {
    // Every small case: 1–3 models, each loaded or not, waits around the limit, with or without
    // the spread (some served by others, some paying a load), PLACEMENT=queue.
    let seed = 7
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
      return seed / 2 ** 31
    }
    for (let round = 0; round < 2_000; round++) {
      const keys = ['a', 'b', 'c'].slice(0, 1 + Math.floor(random() * 3))
      const heads = keys.flatMap((k, i) =>
        Array.from({ length: 1 + Math.floor(random() * 2) }, (_, j) =>
          head(`${k}${j}`, i * 10 + j, k, random() < 0.4),
        ),
      )
      const waits = new Map<string, number | null>(
        keys.map((k) => [k, random() < 0.2 ? null : NOW - Math.floor(random() * 2 * MAX_WAIT)] as const),
      )
      const p: Placement =
        random() < 0.5
          ? { maxWaitSeconds: MAX_WAIT, spread: null }
          : loads(
              2 + Math.floor(random() * 4),
              Object.fromEntries(
                keys.map((k) => [
                  k,
                  { waiting: Math.floor(random() * 2_000), serving: Math.floor(random() * 3), rate: 100 },
                ]),
              ),
            )
      // Asked of the candidates (PostgreSQL asks before the heads are read): some have no head.
      const headless = random() < 0.5 ? [{ candidate: { model: 'd', loaded: random() < 0.5 } }] : []
      waits.set('d', NOW - MAX_WAIT)
      const read = new Set(slugsToAge(p, [...heads, ...headless]))
      const some = new Map([...waits].filter(([k]) => read.has(k)))
      const all = placeHeads(
        p,
        heads.map((h) => ({ ...h })),
        waits,
        NOW,
      )
      const fewer = placeHeads(
        p,
        heads.map((h) => ({ ...h })),
        some,
        NOW,
      )
      expect(fewer.map((h) => [h.batch_id, h.rank])).toEqual(all.map((h) => [h.batch_id, h.rank]))
      expect(pickClaim(fewer)?.batch_id).toBe(pickClaim(all)?.batch_id)
    }
  })
})

describe('docs/api.md §7 Placement: a spare GPU (rule 5)', () => {
  const busy = (key: string): ModelNow => ({ ...model(key, true), busy: true })
  test('the models loaded there and idle first, then the most under-served other model whose loading pays, then the busy ones', () => {
    const p = { ...loads(1, { a: { waiting: 500 }, b: { waiting: 500 }, c: { waiting: 900 } }), spare: true }
    // a is busy on one GPU, b loaded and idle on the other: b's work first (no load), then c, then a.
    expect(order(rankModels(p, [busy('a'), model('b', true), model('c')], NOW))).toEqual(['b', 'c', 'a'])
    // Nothing idle loaded: another model before the busy one — the GPU would idle otherwise.
    expect(order(rankModels(p, [busy('a'), model('c')], NOW))).toEqual(['c', 'a'])
    // Without a spare GPU, the worker keeps to what it serves (rule 3).
    expect(order(rankModels({ ...p, spare: false }, [busy('a'), model('c')], NOW))).toEqual(['a'])
  })

  test('of the models it is busy with, first those a copy of which pays on the spare GPU (the job says copy), then the rest', () => {
    // a's 500 waiting requests outlast a load at the rate it is served here (100/s × 3 s); d's 200 do not.
    const p = { ...loads(1, { a: { waiting: 500 }, d: { waiting: 200 } }), spare: true }
    expect(copyPays(p, 'a')).toBe(true)
    expect(copyPays(p, 'd')).toBe(false)
    const ranks = rankModels(p, [busy('d'), busy('a')], NOW)
    expect(order(ranks)).toEqual(['a', 'd'])
    expect(ranks.get('a')).toBeLessThan(ranks.get('d')!)
    // Served by another worker too: the waiting work must outlast a load at both rates ((200 + 100) × 3).
    expect(copyPays({ ...loads(2, { a: { waiting: 500, serving: 1, rate: 200 } }), spare: true }, 'a')).toBe(
      false,
    )
    // Never without a spare GPU.
    expect(copyPays({ ...p, spare: false }, 'a')).toBe(false)
  })
})
