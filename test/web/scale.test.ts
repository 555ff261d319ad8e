import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser, Page } from 'playwright-core'
import { newId } from '../../src/lib/ids'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession } from '../helpers/browser'
import { type MadeUser, makeUser } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import { rowsOf } from '../helpers/rows'
import { eventually } from '../helpers/until'

// Issue 9 budgets: the workers page with 1,000 workers and the batches page with 10,000 batches
// stay paged: one request per page, never one per row. Time to the first rows is printed.

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)
describeWith(chromium, 'the dashboard at scale, in a browser', () => {
  let server: TestServer
  let browser: Browser
  let user: MadeUser
  const WORKERS = 1000
  const BATCHES = 10_000

  beforeAll(async () => {
    ;[server, browser] = await Promise.all([startTestServer(), launchBrowser()])
    user = await makeUser(server)
    const now = server.clock.now()
    const { db, tables } = rowsOf(server.deps)
    // Multi-row inserts of at most CHUNK rows: few round trips, within both engines' parameter limits.
    const CHUNK = 1000
    const workerRows = Array.from({ length: WORKERS }, (_, i) => ({
      id: newId('wrk_'),
      org_id: user.personalOrgId,
      name: `node-${String(i).padStart(4, '0')}`,
      hostname: `node-${i}.lab`,
      status: 'online' as const,
      vram_total_gb: 24,
      vram_available_gb: 20,
      registered_at: now,
      last_heartbeat_at: now,
      last_seen_at: now,
    }))
    for (let i = 0; i < WORKERS; i += CHUNK) {
      const chunk = workerRows.slice(i, i + CHUNK)
      await db.insert(tables.workers).values(chunk)
      await db
        .insert(tables.workerGpus)
        .values(chunk.map((w) => ({ worker_id: w.id, vendor: 'nvidia', name: 'L4', vram_gb: 24 })))
    }
    for (let i = 0; i < BATCHES; i += CHUNK)
      await db.insert(tables.batches).values(
        Array.from({ length: Math.min(CHUNK, BATCHES - i) }, () => ({
          id: newId('batch_'),
          user_id: user.id,
          input_file_id: newId('file-'),
          endpoint: '/v1/chat/completions',
          completion_window: '24h',
          model: 'scale-model',
          status: 'completed' as const,
          request_counts_total: 10,
          request_counts_completed: 10,
          created_at: now,
          updated_at: now,
        })),
      )
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  async function signIn(page: Page) {
    await page.goto(server.url)
    await page.getByLabel('Email').fill(user.email)
    await page.getByLabel('Password').fill(user.password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('button', { name: 'Sign out' }).waitFor()
  }

  /** API requests of the page whose path starts with `prefix`. */
  function record(page: Page, prefix: string): URL[] {
    const seen: URL[] = []
    page.on('request', (r) => {
      const url = new URL(r.url())
      if (url.pathname.startsWith(prefix)) seen.push(url)
    })
    return seen
  }

  test(`the workers page with ${WORKERS} workers shows one page of 50 per request`, async () => {
    const s = await openSession(browser, server.url)
    const { page } = s
    await signIn(page)
    const requests = record(page, `/v1/orgs/${user.personalOrgId}/workers`)
    const started = performance.now()
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Workers' }).click()
    const table = page.getByRole('table', { name: /^Workers of / })
    await table.getByRole('row', { name: /node-0999/ }).waitFor()
    console.log(`workers page: first 50 of ${WORKERS} rows in ${Math.round(performance.now() - started)} ms`)
    expect(await table.getByRole('row').count()).toBe(51) // header + 50
    await page.getByRole('button', { name: 'Next page' }).click()
    await table.getByRole('row', { name: /node-0949/ }).waitFor()
    expect(await table.getByRole('row').count()).toBe(51)
    // One request per page shown (a refresh every 5 s may add one), each for one page.
    expect(requests.length).toBeGreaterThanOrEqual(2)
    expect(requests.length).toBeLessThanOrEqual(4)
    for (const r of requests) expect(r.searchParams.get('limit')).toBe('50')
    await s.finish()
  })

  test(`the batches page with ${BATCHES} batches shows one page of 20 per request`, async () => {
    const s = await openSession(browser, server.url)
    const { page } = s
    const requests = record(page, '/v1/batches')
    const started = performance.now()
    await signIn(page)
    const table = page.getByRole('table').first()
    await table
      .getByRole('row', { name: /scale-model/ })
      .first()
      .waitFor()
    console.log(
      `batches page: first 20 of ${BATCHES} rows in ${Math.round(performance.now() - started)} ms (sign-in included)`,
    )
    expect(await table.getByRole('row').count()).toBe(21)
    // Each page is shown once its rows arrived (its request made): the first batch of each differs.
    const firstBatch = () => table.getByRole('row').nth(1).getByRole('link').textContent()
    const pageOne = await firstBatch()
    await page.getByRole('button', { name: 'Next page' }).click()
    await page.getByText('Page 2').waitFor()
    await eventually(async () => expect(await firstBatch()).not.toBe(pageOne))
    await page.getByRole('button', { name: 'Previous page' }).click()
    await page.getByText('Page 1').waitFor()
    await eventually(async () => expect(await firstBatch()).toBe(pageOne))
    expect(requests.length).toBeGreaterThanOrEqual(3)
    expect(requests.length).toBeLessThanOrEqual(5)
    for (const r of requests) expect(r.searchParams.get('limit')).toBe('20')
    await s.finish()
  })
})
