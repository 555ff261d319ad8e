import { afterAll, describe, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { makeUser } from '../helpers/builders'
import {
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §14 fair share through POST /workers/poll, and the queue by owner class on /metrics
// (`gridkeep_queued_batches{owner_class}`). The ordering itself is tested on both engines in
// test/store/fair-share.test.ts.

const t = makeTestApp()
afterAll(() => t.close())

/** `gridkeep_queued_batches{owner_class="…"}` of one scrape. */
async function queued() {
  const text = (await t.req('GET', '/metrics')).text as string
  const value = (cls: string) => {
    const line = text.split('\n').find((l) => l.startsWith(`gridkeep_queued_batches{owner_class="${cls}"} `))
    return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return { idle: value('idle'), running: value('running') }
}

describe('POST /workers/poll: fair share between owners (docs/api.md §14)', () => {
  test("B's one batch is among the next two claims after A's 40; /metrics counts the queue by owner class", async () => {
    const f = await makeFleet(t)
    const a = await makeUser(t)
    const b = await makeUser(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'fair:8b' })
    const queuedBefore = await queued()
    const aBatches = []
    for (let i = 0; i < 40; i++)
      aBatches.push((await makeValidatedBatch(t.deps, { userId: a.id, model: entry.id, requests: 1 })).id)
    const bBatch = (await makeValidatedBatch(t.deps, { userId: b.id, model: entry.id, requests: 1 })).id
    expect(await queued()).toEqual({ idle: queuedBefore.idle! + 41, running: queuedBefore.running! })

    const wid = await registerWorker(t, f.key, { max_concurrent_jobs: 4 })
    expect((await heartbeat(t, f.key, wid, { inventory: [inventoryItem('fair:8b')] })).status).toBe(200)
    const next = [(await poll(t, f.key, wid))?.job_id, (await poll(t, f.key, wid))?.job_id]
    expect(next).toEqual([aBatches[0], bBatch])
    // A runs one and waits with 39; B runs one and waits with none.
    expect(await queued()).toEqual({ idle: queuedBefore.idle!, running: queuedBefore.running! + 39 })
    expect((await poll(t, f.key, wid))?.job_id).toBe(aBatches[1])
  })
})
