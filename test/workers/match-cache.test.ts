import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import {
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §7 Poll rules 1–7: a server keeps what a poll derives from its worker's hosting and
// the catalogue (src/modules/workers/match-cache.ts) while the worker row every poll reads says it
// still holds; each change that could alter a claim is seen by the very next poll.

const t = makeTestApp()
afterAll(() => t.close())

/** Every worker-and-hosting read of the polls from now on: whether its hosting was read. */
function hostingReads() {
  const reads: boolean[] = []
  const find = t.deps.store.fleet.findWorkerWithHosting.bind(t.deps.store.fleet)
  t.deps.store.fleet.findWorkerWithHosting = async (id, knownSeq) => {
    const found = await find(id, knownSeq)
    reads.push(found?.hosting != null)
    return found
  }
  return reads
}

describe('docs/api.md §7 a poll keeps what it derived from its worker', () => {
  test('the hosting is read at the first poll and again only when it changed', async () => {
    const f = await makeFleet(t)
    await makeCatalogEntry(t.deps, { runtime_model_id: 'kept:1' })
    const wid = await registerWorker(t, f.key, { models: ['kept:1'] })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    const reads = hostingReads()
    expect(await poll(t, f.key, wid)).toBeNull()
    expect(await poll(t, f.key, wid)).toBeNull()
    // A steady heartbeat changes nothing the poll derived.
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    expect(await poll(t, f.key, wid)).toBeNull()
    expect(reads).toEqual([true, false, false])
    // A new inventory does.
    expect((await heartbeat(t, f.key, wid, { inventory: [inventoryItem('other:1')] })).status).toBe(200)
    expect(await poll(t, f.key, wid)).toBeNull()
    expect(reads).toEqual([true, false, false, true])
  })

  test('each change is seen by the next poll: a registration in the same second, an inventory, the catalogue, the VRAM', async () => {
    const f = await makeFleet(t)
    const first = await makeCatalogEntry(t.deps, { runtime_model_id: 'first:1' })
    const second = await makeCatalogEntry(t.deps, { runtime_model_id: 'second:1' })
    const wid = await registerWorker(t, f.key, { machine_id: 'box-kept', models: ['first:1'] })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    const batchOf = (model: string) => makeValidatedBatch(t.deps, { userId: f.user.id, model })
    const held = await batchOf(second.id)
    expect(await poll(t, f.key, wid)).toBeNull()

    // Registered again within the same second, now with the second model (the clock stands still).
    expect(
      await registerWorker(t, f.key, {
        machine_id: 'box-kept',
        models: ['second:1'],
        max_concurrent_jobs: 8,
      }),
    ).toBe(wid)
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    expect((await poll(t, f.key, wid))?.job_id).toBe(held.id)
    // The first model is no longer hosted: its batch is not this worker's.
    await batchOf(first.id)
    expect(await poll(t, f.key, wid)).toBeNull()

    // An inventory that brings a third model.
    const third = await makeCatalogEntry(t.deps, { runtime_model_id: 'third:1' })
    const onDisk = await batchOf(third.id)
    expect(await poll(t, f.key, wid)).toBeNull()
    expect((await heartbeat(t, f.key, wid, { inventory: [inventoryItem('third:1')] })).status).toBe(200)
    expect((await poll(t, f.key, wid))?.job_id).toBe(onDisk.id)

    // A catalogue entry added for a model the worker already hosts.
    expect((await heartbeat(t, f.key, wid, { inventory: [inventoryItem('fourth:1')] })).status).toBe(200)
    expect(await poll(t, f.key, wid)).toBeNull()
    const fourth = await makeCatalogEntry(t.deps, { runtime_model_id: 'fourth:1' })
    const added = await batchOf(fourth.id)
    expect((await poll(t, f.key, wid))?.job_id).toBe(added.id)

    // A VRAM total below the entry's need (8 GB), then enough again.
    const big = await batchOf(fourth.id)
    expect(
      (await heartbeat(t, f.key, wid, { inventory: [inventoryItem('fourth:1')], vram_total_gb: 4 })).status,
    ).toBe(200)
    expect(await poll(t, f.key, wid)).toBeNull()
    expect((await heartbeat(t, f.key, wid, { inventory: [inventoryItem('fourth:1')] })).status).toBe(200)
    expect((await poll(t, f.key, wid))?.job_id).toBe(big.id)
  })
})
