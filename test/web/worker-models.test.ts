import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, signIn } from '../helpers/browser'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import { heartbeat, inventoryItem, makeCatalogEntry, registerWorker } from '../helpers/workers'

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)

describeWith(chromium, 'the models a worker holds, on the Workers page', () => {
  // docs/api.md §11 Workers: each model a worker holds and where it stands — loaded, loading, on
  // disk, downloading with its progress — from the worker row's models[] (docs/api.md §7), live.

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

  /** A browser session of `user`, signed in, on the Workers page. */
  async function workersPage(user: { email: string; password: string }) {
    const s = await openSession(browser, server.url)
    await s.page.goto(server.url)
    await signIn(s.page, user.email, user.password)
    await s.page.getByRole('link', { name: 'Workers', exact: true }).click()
    return s
  }

  test('loaded, loading, on disk and downloading with its progress; a finished load shows without a reload', async () => {
    const user = await makeUser(server)
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const worker = await registerWorker(server, key, { name: 'lab-gpu-1', capabilities: { loads: true } })
    const inventory = (loaded: string[]) =>
      ['qwen', 'llama', 'mistral'].map((n) => inventoryItem(n, { loaded: loaded.includes(n) }))
    expect(
      (
        await heartbeat(server, key, worker, {
          loaded_models: ['qwen'],
          loading_models: ['llama'],
          inventory: inventory(['qwen']),
        })
      ).status,
    ).toBe(200)
    // A download asked of it (docs/api.md §7 pull_models), 30 % through.
    const entry = await makeCatalogEntry(server.deps, { runtime_model_id: 'phi', size_gb: 1 })
    const now = server.clock.now()
    expect(
      await server.deps.store.fleet.askPull(
        {
          catalog_id: entry.id,
          worker_id: worker,
          runtime: 'llama.cpp',
          runtime_model_id: 'phi',
          asked_at: now,
          last_progress_at: now,
        },
        null,
      ),
    ).toBe(true)
    const progress = await server.req('POST', '/workers/model-progress', {
      token: key,
      body: {
        worker_id: worker,
        model: 'phi',
        status: 'downloading',
        completed_bytes: 300,
        total_bytes: 1000,
      },
    })
    expect(progress.status).toBe(200)

    const s = await workersPage(user)
    const { page } = s

    await page.getByRole('columnheader', { name: 'Models' }).waitFor()
    const models = page
      .getByRole('row', { name: /lab-gpu-1/ })
      .getByRole('list', { name: 'Models of lab-gpu-1' })
    const item = (name: string) => models.getByRole('listitem').filter({ hasText: name })
    await item('qwen').getByText('loaded', { exact: true }).waitFor()
    await item('llama').getByText('loading', { exact: true }).waitFor()
    await item('mistral').getByText('on disk', { exact: true }).waitFor()
    await item('phi').getByText('downloading 30 %', { exact: true }).waitFor()
    // What is loaded comes first, then what is on its way, then the rest.
    expect(await models.getByRole('listitem').allTextContents()).toEqual([
      'qwen loaded',
      'llama loading',
      'phi downloading 30 %',
      'mistral on disk',
    ])
    await s.screenshot('worker-models')

    // The load finished: the next heartbeat says so, and the page follows without a reload.
    await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }))
    expect(
      (
        await heartbeat(server, key, worker, {
          loaded_models: ['qwen', 'llama'],
          inventory: inventory(['qwen', 'llama']),
        })
      ).status,
    ).toBe(200)
    await item('llama').getByText('loaded', { exact: true }).waitFor({ timeout: 12_000 })
    expect(await page.evaluate(() => (globalThis as { sameDocument?: boolean }).sameDocument)).toBe(true)
    await s.finish()
  })

  test('which model sits on which GPU, with each GPU’s memory; a model moved to another GPU shows there without a reload', async () => {
    const user = await makeUser(server)
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const gpu = (index: number) => ({
      vendor: 'nvidia',
      name: 'NVIDIA L4',
      vram_gb: 24,
      driver: '550.54',
      cuda: '12.4',
      index,
    })
    const worker = await registerWorker(server, key, {
      name: 'lab-gpu-2',
      capabilities: { loads: true },
      gpus: [gpu(0), gpu(1)],
    })
    const inventory = (loaded: string[]) =>
      ['qwen', 'llama', 'big'].map((n) => inventoryItem(n, { loaded: loaded.includes(n) }))
    const beat = (o: Record<string, unknown>) => heartbeat(server, key, worker, o)
    expect(
      (
        await beat({
          loaded_models: ['qwen', 'llama'],
          inventory: inventory(['qwen', 'llama']),
          gpus: [
            { index: 0, memory_used_gb: 10.9, memory_total_gb: 24 },
            { index: 1, memory_used_gb: 21.5, memory_total_gb: 24 },
          ],
          model_gpus: [
            { name: 'qwen', gpus: [0] },
            { name: 'llama', gpus: [1] },
          ],
        })
      ).status,
    ).toBe(200)

    const s = await workersPage(user)
    const { page } = s
    const row = page.getByRole('row', { name: /lab-gpu-2/ })
    const gpus = row.getByRole('list', { name: 'GPUs of lab-gpu-2' })
    await gpus.getByRole('listitem').first().waitFor()
    expect(await gpus.getByRole('listitem').allTextContents()).toEqual([
      'GPU 0 NVIDIA L4 10.9 / 24 GB · qwen',
      'GPU 1 NVIDIA L4 21.5 / 24 GB · llama',
    ])
    expect(await gpus.getByRole('meter', { name: 'Memory of GPU 1' }).getAttribute('value')).toBe(
      String(21.5 / 24),
    )
    const models = row.getByRole('list', { name: 'Models of lab-gpu-2' })
    await models.getByRole('listitem').filter({ hasText: 'qwen' }).getByText('on GPU 0').waitFor()
    await s.screenshot('worker-gpus')

    // Both unloaded, and a model across both GPUs (tensor parallel) loaded: the page follows.
    expect(
      (
        await beat({
          loaded_models: ['big'],
          inventory: inventory(['big']),
          gpus: [
            { index: 0, memory_used_gb: 21, memory_total_gb: 24 },
            { index: 1, memory_used_gb: 21, memory_total_gb: 24 },
          ],
          model_gpus: [{ name: 'big', gpus: [0, 1] }],
        })
      ).status,
    ).toBe(200)
    await gpus
      .getByRole('listitem')
      .filter({ hasText: 'GPU 1' })
      .getByText('big')
      .waitFor({ timeout: 12_000 })
    expect(await gpus.getByRole('listitem').allTextContents()).toEqual([
      'GPU 0 NVIDIA L4 21 / 24 GB · big',
      'GPU 1 NVIDIA L4 21 / 24 GB · big',
    ])
    await models.getByRole('listitem').filter({ hasText: 'big' }).getByText('on GPU 0, 1').waitFor()
    await s.finish()
  })

  test('a download that failed: its state, why, and until when the worker is not asked for it again', async () => {
    const user = await makeUser(server)
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const worker = await registerWorker(server, key, { name: 'lab-gpu-2', max_download_gb: 10, models: [] })
    expect((await heartbeat(server, key, worker)).status).toBe(200)
    const entry = await makeCatalogEntry(server.deps, { runtime_model_id: 'gemma', size_gb: 1 })
    const now = server.clock.now()
    expect(
      await server.deps.store.fleet.askPull(
        {
          catalog_id: entry.id,
          worker_id: worker,
          runtime: 'ollama',
          runtime_model_id: 'gemma',
          asked_at: now,
          last_progress_at: now,
        },
        null,
      ),
    ).toBe(true)
    const error = `sha256 of gemma.gguf is ${'b'.repeat(64)}, the catalogue's is ${'a'.repeat(64)}; the file was deleted`
    const failed = await server.req('POST', '/workers/model-progress', {
      token: key,
      body: { worker_id: worker, model: 'gemma', status: 'failed', error },
    })
    expect(failed.status).toBe(200)

    const s = await workersPage(user)
    const { page } = s
    const item = page
      .getByRole('row', { name: /lab-gpu-2/ })
      .getByRole('list', { name: 'Models of lab-gpu-2' })
      .getByRole('listitem')
      .filter({ hasText: 'gemma' })
    await item.getByText('download failed', { exact: true }).waitFor()
    await item.getByText(error, { exact: false }).waitFor()
    await item.getByText('not asked again before', { exact: false }).waitFor()
    await s.finish()
  })

  test('a load that failed: its state, why, and until when the worker does not load it again; once it may, on disk again without a reload', async () => {
    const user = await makeUser(server)
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const worker = await registerWorker(server, key, { name: 'lab-gpu-4', capabilities: { loads: true } })
    const inventory = ['qwen', 'broken'].map((n) => inventoryItem(n, { loaded: n === 'qwen' }))
    const error = 'exit code 1: E llama_model_load: model is corrupted or incomplete'
    expect(
      (
        await heartbeat(server, key, worker, {
          loaded_models: ['qwen'],
          inventory,
          load_failures: [{ name: 'broken', error, failures: 2, retry_in_seconds: 120 }],
        })
      ).status,
    ).toBe(200)

    const s = await workersPage(user)
    const { page } = s
    const models = page
      .getByRole('row', { name: /lab-gpu-4/ })
      .getByRole('list', { name: 'Models of lab-gpu-4' })
    const item = models.getByRole('listitem').filter({ hasText: 'broken' })
    await item.getByText('load failed', { exact: true }).waitFor()
    await item.getByText(error, { exact: false }).waitFor()
    await item.getByText('not loaded there again before', { exact: false }).waitFor()
    await s.screenshot('worker-load-failed')

    // The worker may load it again: its next heartbeat leaves it out, and the page follows.
    await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }))
    expect((await heartbeat(server, key, worker, { loaded_models: ['qwen'], inventory })).status).toBe(200)
    await item.getByText('on disk', { exact: true }).waitFor({ timeout: 12_000 })
    expect(await item.getByText('not loaded there again before', { exact: false }).count()).toBe(0)
    expect(await page.evaluate(() => (globalThis as { sameDocument?: boolean }).sameDocument)).toBe(true)
    await s.finish()
  })
})
