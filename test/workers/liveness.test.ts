import { afterAll, describe, expect, test } from 'bun:test'
import { refreshStateGauges } from '../../src/modules/metrics/service'
import { computeCapacity } from '../../src/modules/pool/service'
import { runOnce } from '../../src/services/sweeper'
import { makeTestApp } from '../helpers/app'
import {
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §7 read-time liveness, one cutoff (workers/liveness.ts): at any instant the worker
// listing, pool capacity, /metrics, poll and the sweeper agree on who is online. A worker seen
// exactly HEARTBEAT_TIMEOUT_SECONDS ago is silent everywhere; one second less, online everywhere.

const t = makeTestApp()
afterAll(() => t.close())

describe('one online cutoff', () => {
  test('listing, pool capacity, gauges, poll and the sweeper flip at the same second', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'live:1' })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const id = await registerWorker(t, f.key, { models: ['live:1'] })
    expect((await heartbeat(t, f.key, id, { inventory: [] })).status).toBe(200)
    t.deps.startedAt = t.clock.now() - 10_000 // past the sweeper's startup grace
    const anonymous = { kind: 'anonymous' as const }

    const views = async () => {
      const listed = await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })
      await refreshStateGauges(t.deps)
      const gauge = (await t.deps.metrics.workers.get()).values.find(
        (v) => v.labels.status === 'online' && v.labels.activity === 'idle',
      )
      return {
        listing: listed.body.data[0].status,
        pool: (await computeCapacity(t.deps, anonymous)).workers_online,
        gauge: gauge?.value,
      }
    }

    t.clock.advance(t.config.HEARTBEAT_TIMEOUT_SECONDS - 1)
    expect(await views()).toEqual({ listing: 'online', pool: 1, gauge: 1 })
    expect((await runOnce(t.deps)).workers_offline).toEqual([])

    t.clock.advance(1)
    expect(await views()).toEqual({ listing: 'offline', pool: 0, gauge: 0 })
    // Poll hands nothing to a worker the sweeper would call silent; the sweeper takes it offline.
    expect(await poll(t, f.key, id)).toBeNull()
    expect((await runOnce(t.deps)).workers_offline).toEqual([id])
    // Back after a heartbeat: the batch that waited is its to claim.
    await heartbeat(t, f.key, id, { inventory: [] })
    expect((await poll(t, f.key, id))?.job_id).toBe(batch.id)
  })
})
