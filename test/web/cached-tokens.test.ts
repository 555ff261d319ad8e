import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import type { Browser } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, signIn } from '../helpers/browser'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import {
  heartbeat,
  makeCatalogEntry,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  sha,
  upload,
} from '../helpers/workers'

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)

describeWith(chromium, 'cached prompt tokens in a browser', () => {
  // docs/api.md §11: a completed batch's page says its tokens and the share of its prompt tokens the
  // engines served from their cache (docs/api.md §6 `usage`); the usage page has a column of them
  // (§14), in its table and its CSV.

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

  test('the batch page shows the share of prompt tokens from cache; the usage page the cached tokens', async () => {
    const user = await makeUser(server)
    const { key } = await makeWorkerKey(server, user, user.personalOrgId)
    const runtimeId = 'cache-dash:7b'
    const model = (
      await makeCatalogEntry(server.deps, { runtime_model_id: runtimeId, digest: sha(runtimeId) })
    ).id
    const workerId = await registerWorker(server, key, { models: [runtimeId] })
    expect((await heartbeat(server, key, workerId)).status).toBe(200)
    const batch = await makeValidatedBatch(server.deps, { userId: user.id, model, requests: 3 })
    const job = (await poll(server, key, workerId))!
    expect(job.job_id).toBe(batch.id)
    // 1,500 prompt tokens, 1,140 of them from the cache; the third line says nothing of its cache.
    const usage = (prompt: number, cached?: number) => ({
      prompt_tokens: prompt,
      completion_tokens: 10,
      total_tokens: prompt + 10,
      ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
    })
    const lines = [
      okLine('req-1', usage(600, 600)),
      okLine('req-2', usage(600, 540)),
      okLine('req-3', usage(300)),
    ]
    const done = await upload(
      server,
      key,
      { worker_id: workerId, job_id: batch.id, assignment_id: job.assignment_id },
      lines.join('\n'),
    )
    expect(done.status).toBe(200)

    const s = await openSession(browser, server.url)
    try {
      const { page } = s
      await page.goto(`${server.url}/app/batches/${batch.id}`)
      await signIn(page, user.email, user.password)
      await page.getByRole('heading', { name: `Batch ${batch.id}` }).waitFor()
      await page.getByText('1,500 prompt, 30 completion').waitFor()
      // 1,140 of 1,500 is 76 %.
      expect(await page.getByLabel('Prompt tokens from cache').textContent()).toBe('76 % (1,140 of 1,500)')
      await s.screenshot('batch-cached-tokens')

      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Usage' }).click()
      const table = page.getByRole('table', { name: 'Usage' })
      await table.getByRole('columnheader', { name: 'Cached prompt tokens' }).waitFor()
      await page.getByLabel('Group by').selectOption('model')
      await table.getByRole('row', { name: `${model} 1 3 1,500 1,140 30 1,530`, exact: true }).waitFor()
      const [csv] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('button', { name: 'Download CSV' }).click(),
      ])
      const csvLines = readFileSync((await csv.path())!, 'utf8')
        .trim()
        .split('\n')
      expect(csvLines[0]).toBe(
        'start,end,model,batches,requests,prompt_tokens,cached_tokens,completion_tokens,total_tokens',
      )
      expect(csvLines.slice(1).map((l) => l.split(',').slice(2).join(','))).toEqual([
        `${model},1,3,1500,1140,30,1530`,
      ])
    } finally {
      await s.finish()
    }
  })
})
