import { afterAll, describe, expect, test } from 'bun:test'
import { MATCH_CACHE_WORKERS, MatchCache } from '../../src/modules/workers/match-cache'
import { loadCatalogue } from '../../src/modules/workers/matching'
import { makeTestApp } from '../helpers/app'
import { testEngine } from '../helpers/postgres'
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
  t.deps.store.fleet.findWorkerWithHosting = async (id, knownSeq, heads) => {
    const found = await find(id, knownSeq, heads)
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

describe('docs/api.md §7 the waiting heads of what a poll derived last come with its worker row', () => {
  test('asked with the row once something is kept, used only when the poll derived the same (read with the row on PostgreSQL)', async () => {
    const f = await makeFleet(t)
    const first = await makeCatalogEntry(t.deps, { runtime_model_id: 'ahead:1' })
    const second = await makeCatalogEntry(t.deps, { runtime_model_id: 'ahead:2' })
    const wid = await registerWorker(t, f.key, { models: ['ahead:1'], max_concurrent_jobs: 4 })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    const asked: boolean[] = []
    const given: boolean[] = []
    const find = t.deps.store.fleet.findWorkerWithHosting.bind(t.deps.store.fleet)
    t.deps.store.fleet.findWorkerWithHosting = async (id, knownSeq, heads) => {
      if (id === wid) asked.push(heads !== undefined)
      return find(id, knownSeq, heads)
    }
    const claim = t.deps.store.queue.claim.bind(t.deps.store.queue)
    t.deps.store.queue.claim = async (req) => {
      if (req.workerId === wid) given.push(req.heads !== undefined)
      return claim(req)
    }
    const batchOf = (model: string) => makeValidatedBatch(t.deps, { userId: f.user.id, model })
    try {
      const a = await batchOf(first.id)
      const b = await batchOf(first.id)
      // Nothing kept yet: the row alone, and the claim reads the heads.
      expect((await poll(t, f.key, wid))?.job_id).toBe(a.id)
      expect((await poll(t, f.key, wid))?.job_id).toBe(b.id)
      expect(asked).toEqual([false, true])
      expect(given).toEqual([false, testEngine === 'postgres'])
      // A new inventory: the heads read with the row are of the models it had; the claim reads the
      // new ones itself, and takes their batch.
      const c = await batchOf(second.id)
      expect((await heartbeat(t, f.key, wid, { inventory: [inventoryItem('ahead:2')] })).status).toBe(200)
      expect((await poll(t, f.key, wid))?.job_id).toBe(c.id)
      expect(asked).toEqual([false, true, true])
      expect(given).toEqual([false, testEngine === 'postgres', false])
    } finally {
      t.deps.store.fleet.findWorkerWithHosting = find
      t.deps.store.queue.claim = claim
    }
  })
})

describe('the kept matches are bounded: the least recently polled worker goes first', () => {
  test('many distinct workers: never more kept than the capacity; the last used stay, the others are derived again', async () => {
    const f = await makeFleet(t)
    await makeCatalogEntry(t.deps, { runtime_model_id: 'bounded:1' })
    const wid = await registerWorker(t, f.key, { models: ['bounded:1'] })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    const { worker, hosting } = (await t.deps.store.fleet.findWorkerWithHosting(wid))!
    const catalogue = await loadCatalogue(t.deps)
    const cache = new MatchCache(8)
    const as = (id: string) => ({ ...worker, id })
    // 1,000 worker ids, each polling once; `steady` polls between every two of them.
    for (let i = 0; i < 1_000; i++) {
      expect(cache.matches(as(`w-${i}`), hosting!, catalogue)).not.toBeNull()
      expect(cache.matches(as('steady'), i === 0 ? hosting! : null, catalogue)).not.toBeNull()
      expect(cache.size).toBeLessThanOrEqual(8)
    }
    expect(cache.size).toBe(8)
    // Kept: `steady` (used last) and the last 7 ids; the first ones went.
    expect(cache.seqOf('steady')).toBe(worker.hosting_seq)
    for (let i = 993; i < 1_000; i++) expect(cache.seqOf(`w-${i}`)).toBe(worker.hosting_seq)
    expect(cache.seqOf('w-992')).toBeUndefined()
    expect(cache.seqOf('w-0')).toBeUndefined()
    // A worker that went, asked without its hosting: null, so the poll reads it (workerMatches).
    expect(cache.matches(as('w-0'), null, catalogue)).toBeNull()
    const servable = cache.matches(as('steady'), null, catalogue)!.servable.map((s) => s.model)
    expect(servable.length).toBeGreaterThan(0)
    expect(cache.matches(as('w-0'), hosting!, catalogue)?.servable.map((s) => s.model)).toEqual(servable)
    expect(new MatchCache().size).toBe(0)
    expect(MATCH_CACHE_WORKERS).toBeGreaterThan(8)
  })

  test('a server keeping one worker: two workers polling in turn each read their hosting again, and each gets its own batch', async () => {
    const f = await makeFleet(t)
    const a = await makeCatalogEntry(t.deps, { runtime_model_id: 'turn-a:1' })
    const b = await makeCatalogEntry(t.deps, { runtime_model_id: 'turn-b:1' })
    const wa = await registerWorker(t, f.key, { models: ['turn-a:1'] })
    const wb = await registerWorker(t, f.key, { models: ['turn-b:1'] })
    for (const w of [wa, wb]) expect((await heartbeat(t, f.key, w)).status).toBe(200)
    const kept = t.deps.matchCache
    t.deps.matchCache = new MatchCache(1)
    try {
      const reads = hostingReads()
      expect(await poll(t, f.key, wa)).toBeNull()
      expect(await poll(t, f.key, wb)).toBeNull()
      const forA = await makeValidatedBatch(t.deps, { userId: f.user.id, model: a.id })
      const forB = await makeValidatedBatch(t.deps, { userId: f.user.id, model: b.id })
      expect((await poll(t, f.key, wa))?.job_id).toBe(forA.id)
      expect((await poll(t, f.key, wb))?.job_id).toBe(forB.id)
      expect(reads).toEqual([true, true, true, true])
      expect(t.deps.matchCache.size).toBe(1)
      // The same worker again: kept, its hosting not read.
      expect(await poll(t, f.key, wb)).toBeNull()
      expect(reads).toEqual([true, true, true, true, false])
    } finally {
      t.deps.matchCache = kept
    }
  })
})
