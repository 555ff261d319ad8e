import { expect, test } from 'bun:test'
import type { Deps } from '../../src/deps'
import { manualClock } from '../../src/lib/clock'
import { PlacementView } from '../../src/modules/workers/placement'

// docs/api.md §7 placement: a server's view of the queue and the fleet, read at most once a second,
// with the claims and validations it made since on top (src/modules/workers/placement.ts).

const reads = { n: 0 }
const clock = manualClock()
const deps = {
  clock,
  config: { HEARTBEAT_TIMEOUT_SECONDS: 120 },
  store: {
    queue: {
      waitingWork: async () => {
        reads.n++
        return [{ model: 'm', requests: 10 }]
      },
    },
    fleet: { placementFleet: async () => [] },
  },
} as unknown as Deps

const kept = (view: PlacementView) => (view as unknown as { changes: unknown[] }).changes.length

test('what this server claims is added to the view read since, and nothing is kept while no view is', async () => {
  const view = new PlacementView()
  // No worker that loads models has polled: no view is kept, and no change piles up for it.
  for (let i = 0; i < 1_000; i++) view.claimed('w1', 'm', 1)
  view.validated('m', 5)
  expect(kept(view)).toBe(0)
  // The first read sees them (they are in the table it reads) and adds none of them again.
  const first = await view.read(deps)
  expect(reads.n).toBe(1)
  expect(first.changes).toEqual([])
  // Those made after it are added to it, until the next read.
  view.claimed('w2', 'm', 3)
  const again = await view.read(deps)
  expect(reads.n).toBe(1)
  expect(again.changes).toEqual([{ seq: 1_002, workerId: 'w2', model: 'm', requests: 3 }])
  clock.advance(1)
  expect((await view.read(deps)).changes).toEqual([])
  expect(reads.n).toBe(2)
})
