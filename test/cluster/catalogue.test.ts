import { afterAll, beforeAll, expect, test } from 'bun:test'
import { CATALOGUE_REREAD_MS } from '../../src/store/catalogue'
import { startTestServer, type TestServer } from '../helpers/app'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import {
  heartbeatBody,
  inventoryItem,
  makeCatalogEntry,
  makeValidatedBatch,
  registerBody,
} from '../helpers/workers'

// docs/api.md §12: each instance keeps the catalogue in memory for its polls; a catalogue change on one
// instance reaches the other through its `models_changed` signal (NOTIFY), well before the
// CATALOGUE_REREAD_MS safety net.

describeWith(postgres, 'two instances share the catalogue', () => {
  let a: TestServer
  let b: TestServer

  beforeAll(async () => {
    const env = { DATABASE_URL: await freshPostgresUrl(), DATABASE_POOL_SIZE: '8' }
    a = await startTestServer(env)
    b = await startTestServer(env)
  })
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
  })

  test('an entry added on one instance is claimable through the other at once', async () => {
    const user = await makeUser(b)
    const key = (await makeWorkerKey(b, user, user.personalOrgId)).key
    const reg = await b.req('POST', '/workers/register', { token: key, body: registerBody() })
    const wid = reg.body.worker_id as string
    const hb = heartbeatBody({ inventory: [inventoryItem('late:8b')] })
    expect((await b.req('POST', `/workers/${wid}/heartbeat`, { token: key, body: hb })).status).toBe(200)
    // B has read (and keeps) a catalogue without the entry.
    expect(
      (await b.req('POST', '/workers/poll', { token: key, body: { worker_id: wid } })).body.job,
    ).toBeNull()

    const entry = await makeCatalogEntry(a.deps, { runtime_model_id: 'late:8b' })
    const batch = await makeValidatedBatch(a.deps, { userId: user.id, model: entry.id, requests: 1 })
    const t0 = performance.now()
    let job: { job_id: string } | null = null
    while (!job && performance.now() - t0 < CATALOGUE_REREAD_MS / 3) {
      job = (await b.req('POST', '/workers/poll', { token: key, body: { worker_id: wid } })).body.job
      if (!job) await Bun.sleep(20)
    }
    expect(job?.job_id).toBe(batch.id)
  }, 30_000)
})
