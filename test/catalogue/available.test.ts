import { afterAll, expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import {
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  registerWorker,
  sha,
} from '../helpers/workers'

// docs/api.md §4: `available` = some online worker can serve the entry now, by the same predicate as
// poll (servableCatalogIds). It follows workers coming, fitting, and going silent.

const t = makeTestApp()
afterAll(() => t.close())

const availability = async (token: string) =>
  Object.fromEntries(
    ((await t.req('GET', '/v1/models', { token })).body.data as { id: string; available: boolean }[]).map(
      (m) => [m.id, m.available],
    ),
  )

test('available is true exactly while an online worker hosts and fits the entry', async () => {
  const fleet = await makeFleet(t)
  const small = await makeCatalogEntry(t.deps, { runtime_model_id: 'small:7b', vram_gb: 8 })
  const big = await makeCatalogEntry(t.deps, { runtime_model_id: 'big:70b', vram_gb: 48 })
  const pinned = await makeCatalogEntry(t.deps, {
    runtime_model_id: 'pinned:1b',
    digest: sha('right-weights'),
  })
  expect(await availability(fleet.user.token)).toMatchObject({
    [small.id]: false,
    [big.id]: false,
    [pinned.id]: false,
  })

  const wid = await registerWorker(t, fleet.key, { models: ['small:7b', 'big:70b'] })
  await heartbeat(t, fleet.key, wid, {
    vram_total_gb: 24,
    inventory: [
      inventoryItem('small:7b'),
      inventoryItem('big:70b'),
      inventoryItem('pinned:1b', { sha256: sha('other-weights') }),
    ],
  })
  // Hosts and fits → available; too big for 24 GB → not; same tag, different digest → not.
  expect(await availability(fleet.user.token)).toMatchObject({
    [small.id]: true,
    [big.id]: false,
    [pinned.id]: false,
  })
  expect((await t.req('GET', `/v1/models/${small.id}`, { token: fleet.user.token })).body.available).toBe(
    true,
  )

  // Silent past the heartbeat timeout: offline at read time, nothing is available.
  t.clock.advance(t.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
  expect(await availability(fleet.user.token)).toMatchObject({ [small.id]: false })
})

// GET /v1/models answers from a view kept per server (catalogue/view.ts): every event that can
// change `available` or the list shows on the very next request.
test('kept answers follow each change on the next request: VRAM, a silent worker back, a new entry', async () => {
  const fleet = await makeFleet(t)
  const big = await makeCatalogEntry(t.deps, { runtime_model_id: 'kept-big:70b', vram_gb: 48 })
  const wid = await registerWorker(t, fleet.key, { models: ['kept-big:70b'] })
  await heartbeat(t, fleet.key, wid, { vram_total_gb: 24, inventory: [inventoryItem('kept-big:70b')] })
  expect(await availability(fleet.user.token)).toMatchObject({ [big.id]: false })

  // The same inventory with more VRAM: only the worker's fit changed.
  await heartbeat(t, fleet.key, wid, { vram_total_gb: 80, inventory: [inventoryItem('kept-big:70b')] })
  expect(await availability(fleet.user.token)).toMatchObject({ [big.id]: true })
  // A steady heartbeat keeps the answer (and the answer is still right).
  await heartbeat(t, fleet.key, wid, { vram_total_gb: 80, inventory: [inventoryItem('kept-big:70b')] })
  expect(await availability(fleet.user.token)).toMatchObject({ [big.id]: true })

  // Silent: gone from the next answer; a model-progress report brings it back (docs/api.md §7 liveness).
  t.clock.advance(t.config.HEARTBEAT_TIMEOUT_SECONDS)
  expect(await availability(fleet.user.token)).toMatchObject({ [big.id]: false })
  const progress = await t.req('POST', '/workers/model-progress', {
    token: fleet.key,
    body: { worker_id: wid, model: 'other:1b', status: 'downloading', completed_bytes: 1, total_bytes: 2 },
  })
  expect(progress.status).toBe(200)
  expect(await availability(fleet.user.token)).toMatchObject({ [big.id]: true })

  // A catalogue write (the seeding path) shows in the next list.
  const added = await makeCatalogEntry(t.deps, { runtime_model_id: 'kept-new:1b' })
  expect(await availability(fleet.user.token)).toMatchObject({ [added.id]: false, [big.id]: true })
  expect((await t.req('GET', `/v1/models/${added.id}`, { token: fleet.user.token })).status).toBe(200)
})
