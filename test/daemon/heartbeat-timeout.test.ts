import { afterAll, beforeAll, expect, test } from 'bun:test'
import { runOnce as sweep } from '../../src/services/sweeper'
import { startTestServer, type TestServer } from '../helpers/app'
import { daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { makeCatalogEntry, makeFleet, makeValidatedBatch } from '../helpers/workers'

// docs/api.md §7: the heartbeat interval is derived from HEARTBEAT_TIMEOUT_SECONDS (a quarter of it when
// that is under 30 s). A server started with a short timeout keeps a healthy daemon online and its
// batch running: the test moves the server's clock one interval per heartbeat the daemon sends and
// sweeps after each, for longer than the timeout. With a fixed 30 s interval the daemon's second
// heartbeat never comes within the test's time, and the sweeper declares it silent.

const TIMEOUT = 4
let server: TestServer
beforeAll(async () => {
  server = await startTestServer({ HEARTBEAT_TIMEOUT_SECONDS: String(TIMEOUT) })
  server.deps.startedAt = 0 // past the startup grace
})
afterAll(() => server.stop())

test('a short HEARTBEAT_TIMEOUT_SECONDS keeps a healthy daemon online and its batch running', async () => {
  const f = await makeFleet(server)
  const entry = await makeCatalogEntry(server.deps, { runtime: 'openai', runtime_model_id: 'hb/model' })
  const batch = await makeValidatedBatch(server.deps, { userId: f.user.id, model: entry.id, requests: 4 })
  // Every inference request hangs: the batch stays in progress for as long as the test runs.
  const rt = startFakeRuntime({ models: ['hb/model'], behaviour: () => 'hang' })
  const daemon = runAgent(daemonOptions(server.url, f.key, rt.url), fastDeps())
  try {
    await daemon.next('heartbeat', (e) => e.ok)
    for (;;) {
      const b = (await server.req('GET', `/v1/batches/${batch.id}`, { token: f.user.token })).body
      if (b.status === 'in_progress') break
      await daemon.next('heartbeat', (e) => e.ok)
    }
    const interval = Math.floor(TIMEOUT / 4)
    for (let elapsed = 0; elapsed <= TIMEOUT + interval; elapsed += interval) {
      await daemon.next('heartbeat', (e) => e.ok)
      server.clock.advance(interval)
      const pass = await sweep(server.deps)
      expect(pass).toMatchObject({ workers_offline: [], requeued: [], failed: [] })
    }
    const workers = (await server.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body
      .data
    expect(workers[0].status).toBe('online')
    const b = (await server.req('GET', `/v1/batches/${batch.id}`, { token: f.user.token })).body
    expect(b).toMatchObject({ status: 'in_progress', attempts: 0 })
  } finally {
    daemon.agent.shutdown(true)
    await daemon.done
    await rt.stop()
  }
}, 30_000)
