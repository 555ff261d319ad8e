import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser } from 'playwright-core'
import { DOWNLOAD_BACKOFF_FIRST_SECONDS } from '../../src/domain/downloads'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, signIn } from '../helpers/browser'
import { chromium, describeWith } from '../helpers/requires'
import {
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §11 Batch detail: while a batch is validated, why it waits (§6 `waiting`) is shown in
// words beside its status, and follows the fleet without a reload.

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)

describeWith(chromium, 'why a batch waits, in a browser', () => {
  let server: TestServer
  let browser: Browser

  beforeAll(async () => {
    ;[server, browser] = await Promise.all([
      startTestServer({ RATE_LIMIT_LOGIN_PER_MINUTE: '0' }),
      launchBrowser(),
    ])
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  test('the reason beside the status changes live as a worker comes, then goes once claimed', async () => {
    const entry = await makeCatalogEntry(server.deps, { runtime_model_id: 'wait-dash:7b' })
    const f = await makeFleet(server)
    const batch = await makeValidatedBatch(server.deps, { userId: f.user.id, model: entry.id })
    const s = await openSession(browser, server.url)
    const { page } = s
    await page.goto(server.url)
    await signIn(page, f.user.email, f.user.password)
    await page.goto(`${server.url}/app/batches/${batch.id}`)

    const status = page.getByRole('definition').filter({ hasText: 'validated' })
    const noWorker = `No online worker hosts ${entry.id}; no worker has registered it.`
    await status.getByText(noWorker, { exact: true }).waitFor()
    await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }))

    // A worker that hosts the model comes online: the same page says the batch is next in line.
    const wid = await registerWorker(server, f.key, { name: 'wait-box', models: ['wait-dash:7b'] })
    expect((await heartbeat(server, f.key, wid)).status).toBe(200)
    await status
      .getByText(`Next in line for ${entry.id}; 1 online worker can serve it.`, { exact: true })
      .waitFor()
    expect(await page.getByText(noWorker).count()).toBe(0)

    // Claimed: in progress, and no reason any more.
    expect((await poll(server, f.key, wid))?.job_id).toBe(batch.id)
    await page.getByText('in progress', { exact: true }).first().waitFor()
    expect(await page.getByText('Next in line', { exact: false }).count()).toBe(0)
    expect(await page.evaluate(() => (globalThis as { sameDocument?: boolean }).sameDocument)).toBe(true)
    await s.finish()
  })

  test('each reason in words, live: no worker, no fit, downloading with its bytes, loading, queued behind N', async () => {
    const entry = await makeCatalogEntry(server.deps, {
      runtime_model_id: 'wait-all:7b',
      vram_gb: 16,
      size_gb: 5,
    })
    const f = await makeFleet(server)
    await makeValidatedBatch(server.deps, { userId: f.user.id, model: entry.id, requests: 4 })
    const batch = await makeValidatedBatch(server.deps, { userId: f.user.id, model: entry.id })
    const s = await openSession(browser, server.url)
    const { page } = s
    await page.goto(server.url)
    await signIn(page, f.user.email, f.user.password)
    await page.goto(`${server.url}/app/batches/${batch.id}`)
    const status = page.getByRole('definition').filter({ hasText: 'validated' })
    const shows = (text: string) => status.getByText(text, { exact: true }).waitFor()

    await shows(`No online worker hosts ${entry.id}; no worker has registered it.`)
    // A worker hosts it, with too little VRAM.
    const small = await registerWorker(server, f.key, { name: 'small-box', models: ['wait-all:7b'] })
    expect((await heartbeat(server, f.key, small, { vram_total_gb: 8 })).status).toBe(200)
    await shows(`1 online worker hosts ${entry.id}, but none has the 16 GB of VRAM it needs.`)
    // A worker that fits it and may download is asked to fetch it, and reports its bytes.
    const big = await registerWorker(server, f.key, {
      name: 'big-box',
      models: [],
      max_download_gb: 10,
      capabilities: { loads: true },
    })
    const asked = await heartbeat(server, f.key, big, { vram_total_gb: 24 })
    expect(asked.body.pull_models.map((p: { catalogue_id: string }) => p.catalogue_id)).toEqual([entry.id])
    const progress = (body: Record<string, unknown>) =>
      server.req('POST', '/workers/model-progress', {
        token: f.key,
        body: { worker_id: big, model: 'wait-all:7b', ...body },
      })
    expect(
      (await progress({ status: 'downloading', completed_bytes: 300_000, total_bytes: 1_000_000 })).status,
    ).toBe(200)
    await shows(`Worker big-box is downloading ${entry.id}: 300.0 kB of 1.0 MB.`)
    // Downloaded: on its disk, and being loaded.
    expect((await progress({ status: 'completed' })).status).toBe(200)
    const onDisk = { inventory: [inventoryItem('wait-all:7b')], vram_total_gb: 24, activity: 'busy' }
    expect((await heartbeat(server, f.key, big, { ...onDisk, loading_models: ['wait-all:7b'] })).status).toBe(
      200,
    )
    await shows(`Worker big-box is loading ${entry.id} now.`)
    // Loaded: the batch waits its turn behind the older one.
    expect(
      (
        await heartbeat(server, f.key, big, {
          ...onDisk,
          inventory: [inventoryItem('wait-all:7b', { loaded: true })],
          loaded_models: ['wait-all:7b'],
        })
      ).status,
    ).toBe(200)
    await shows(`Queued behind 4 requests in 1 batch of ${entry.id}; 1 online worker can serve it.`)
    await s.finish()
  })

  test('a download that failed: the batch says which worker, and why', async () => {
    const entry = await makeCatalogEntry(server.deps, { runtime_model_id: 'wait-bad:7b', size_gb: 5 })
    const f = await makeFleet(server)
    const batch = await makeValidatedBatch(server.deps, { userId: f.user.id, model: entry.id })
    const s = await openSession(browser, server.url)
    const { page } = s
    await page.goto(server.url)
    await signIn(page, f.user.email, f.user.password)
    await page.goto(`${server.url}/app/batches/${batch.id}`)
    const status = page.getByRole('definition').filter({ hasText: 'validated' })
    await status.getByText(`No online worker hosts ${entry.id}; no worker has registered it.`).waitFor()

    const dl = await registerWorker(server, f.key, { name: 'dl-box', models: [], max_download_gb: 10 })
    const asked = await heartbeat(server, f.key, dl)
    expect(asked.body.pull_models.map((p: { catalogue_id: string }) => p.catalogue_id)).toEqual([entry.id])
    const error = 'the hub answered 404 for wait-bad.gguf (owner/repo@main)'
    const failed = await server.req('POST', '/workers/model-progress', {
      token: f.key,
      body: { worker_id: dl, model: 'wait-bad:7b', status: 'failed', error },
    })
    expect(failed.status).toBe(200)
    // Live, in words: the worker, the error, and when it is tried again.
    const retry = new Date((server.clock.now() + DOWNLOAD_BACKOFF_FIRST_SECONDS) * 1000)
    const when = `${retry.toISOString().slice(0, 16).replace('T', ' ')} UTC`
    await status
      .getByText(
        `Worker dl-box could not download ${entry.id}: ${error}. It is not asked for it again before ${when}.`,
        { exact: true },
      )
      .waitFor()
    await s.finish()
  })
})
