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

// API.md §4: `available` = some online worker can serve the entry now, by the same predicate as
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
