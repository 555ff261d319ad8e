import { afterAll, describe, expect, test } from 'bun:test'
import { DOWNLOAD_BACKOFF_FIRST_SECONDS } from '../../src/domain/downloads'
import { makeTestApp } from '../helpers/app'
import {
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  registerWorker,
  sha,
} from '../helpers/workers'

// docs/api.md §7 model-progress `failed`: a failed download backs its worker off from the entry
// (src/domain/downloads.ts), so the next heartbeat or poll never asks it for the same bytes again;
// the batch says why it waits (docs/api.md §6 download_failed) and the worker row shows the model
// as download_failed. A success ends the back-off, and so does a catalogue change of what the
// entry downloads.

const apps: ReturnType<typeof makeTestApp>[] = []
afterAll(() => {
  for (const a of apps) a.close()
})

async function setup() {
  const t = makeTestApp()
  apps.push(t)
  const f = await makeFleet(t)
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'bad:1', size_gb: 5, digest: sha('bad') })
  const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
  const downloader = (name: string) => registerWorker(t, f.key, { name, max_download_gb: 50, models: [] })
  const asked = async (w: string) =>
    (await heartbeat(t, f.key, w)).body.pull_models.map((p: { catalogue_id: string }) => p.catalogue_id)
  const polled = async (w: string) => {
    const res = await t.req('POST', '/workers/poll', { token: f.key, body: { worker_id: w } })
    expect(res.status).toBe(200)
    return (res.body.pull_models ?? []).map((p: { catalogue_id: string }) => p.catalogue_id)
  }
  const report = (w: string, body: Record<string, unknown>) =>
    t.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: w, model: 'bad:1', ...body },
    })
  const waiting = async () =>
    (await t.req('GET', `/v1/batches/${batch.id}`, { token: f.user.token })).body.waiting
  const modelsOf = async (w: string) => {
    const rows = (await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })).body.data
    return rows.find((r: { id: string }) => r.id === w).models
  }
  return { t, f, entry, downloader, asked, polled, report, waiting, modelsOf }
}

const MISMATCH = `sha256 of bad.gguf is ${sha('other')}, the catalogue's is ${sha('bad')}; the file was deleted`

describe('a failed download backs its worker off (docs/api.md §7 model-progress)', () => {
  test('not asked again by heartbeat or poll until the back-off ends; it doubles while it keeps failing', async () => {
    const { t, entry, downloader, asked, polled, report } = await setup()
    const w = await downloader('gpu-a')
    expect(await asked(w)).toEqual([entry.id])
    expect((await report(w, { status: 'failed', error: MISMATCH })).status).toBe(200)
    // The very next poll and heartbeat, which used to ask again at once.
    expect(await polled(w)).toEqual([])
    expect(await asked(w)).toEqual([])
    t.clock.advance(DOWNLOAD_BACKOFF_FIRST_SECONDS - 1)
    expect(await asked(w)).toEqual([])
    t.clock.advance(1)
    expect(await asked(w)).toEqual([entry.id])
    await report(w, { status: 'failed', error: MISMATCH })
    const [second] = await t.deps.store.fleet.pullFailuresOfWorker(w)
    expect(second).toMatchObject({ catalog_id: entry.id, failures: 2, error: MISMATCH })
    expect(second!.retry_at - t.clock.now()).toBe(2 * DOWNLOAD_BACKOFF_FIRST_SECONDS)
    t.clock.advance(2 * DOWNLOAD_BACKOFF_FIRST_SECONDS - 1)
    expect(await asked(w)).toEqual([])
    t.clock.advance(1)
    expect(await polled(w)).toEqual([entry.id])
    // A success ends it: the count starts over.
    await report(w, { status: 'completed' })
    expect(await t.deps.store.fleet.pullFailuresOfWorker(w)).toEqual([])
  })

  test('another worker may try meanwhile: no worker fetches the same bytes twice in a row', async () => {
    const { entry, downloader, asked, report } = await setup()
    const a = await downloader('gpu-a')
    const b = await downloader('gpu-b')
    expect(await asked(a)).toEqual([entry.id])
    await report(a, { status: 'failed', error: MISMATCH })
    expect(await asked(a)).toEqual([])
    expect(await asked(b)).toEqual([entry.id])
  })

  test('the batch says why it waits, and the worker row shows the model as download_failed', async () => {
    const { t, entry, downloader, asked, report, waiting, modelsOf } = await setup()
    const w = await downloader('gpu-a')
    expect((await waiting()).reason).toBe('no_worker')
    await asked(w)
    await report(w, { status: 'failed', error: MISMATCH })
    const retryAt = t.clock.now() + DOWNLOAD_BACKOFF_FIRST_SECONDS
    expect(await waiting()).toEqual({
      reason: 'download_failed',
      message: expect.stringContaining(`Worker gpu-a could not download ${entry.id}: ${MISMATCH}.`),
      details: {
        catalogue_id: entry.id,
        worker_name: 'gpu-a',
        error: MISMATCH,
        failures: 1,
        retry_at: retryAt,
      },
    })
    expect(await modelsOf(w)).toEqual([
      expect.objectContaining({
        name: 'bad:1',
        state: 'download_failed',
        failure: { error: MISMATCH, failures: 1, retry_at: retryAt },
      }),
    ])
    // Once the back-off ends, neither says so any more.
    t.clock.advance(DOWNLOAD_BACKOFF_FIRST_SECONDS)
    expect((await waiting()).reason).toBe('no_worker')
    expect(await modelsOf(w)).toEqual([])
  })

  test('a daemon that stopped its download sets no back-off; one refusing while backed off keeps its count', async () => {
    const { t, entry, downloader, asked, report } = await setup()
    const w = await downloader('gpu-a')
    await asked(w)
    await report(w, { status: 'failed', error: 'the download was stopped', cause: 'stopped' })
    expect(await t.deps.store.fleet.pullFailuresOfWorker(w)).toEqual([])
    expect(await asked(w)).toEqual([entry.id])
    await report(w, { status: 'failed', error: 'not fetched again before …', cause: 'backed_off' })
    expect(await t.deps.store.fleet.pullFailuresOfWorker(w)).toEqual([
      expect.objectContaining({ failures: 1, retry_at: t.clock.now() + DOWNLOAD_BACKOFF_FIRST_SECONDS }),
    ])
    expect(await asked(w)).toEqual([])
  })

  test('a catalogue change of what the entry downloads lifts the back-off', async () => {
    const { t, entry, downloader, asked, report } = await setup()
    const w = await downloader('gpu-a')
    await asked(w)
    await report(w, { status: 'failed', error: MISMATCH })
    expect(await asked(w)).toEqual([])
    // The administrator fixes the pin.
    await makeCatalogEntry(t.deps, {
      id: entry.id,
      runtime_model_id: 'bad:1',
      size_gb: 5,
      digest: sha('fixed'),
    })
    expect(await asked(w)).toEqual([entry.id])
  })

  test('bad bodies: an unknown cause is a 400', async () => {
    const { downloader, report } = await setup()
    const w = await downloader('gpu-a')
    expect((await report(w, { status: 'failed', cause: 'bored' })).status).toBe(400)
  })
})
