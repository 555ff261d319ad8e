import { afterAll, beforeAll, expect, setDefaultTimeout, test } from 'bun:test'
import type { Browser, Page } from 'playwright-core'
import type { Job } from '../../src/modules/workers/claim'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, type Session } from '../helpers/browser'
import { makeUser, makeWorkerKey } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import { eventually } from '../helpers/until'
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

describeWith(chromium, 'batch progress and shards in a browser', () => {
  // docs/api.md §16 on the dashboard: a batch's progress bar, throughput and time left, and a split
  // batch's shards (waiting; running on which worker; done; attempts), all live without a reload.
  // Small shard bounds (10 to 100 requests) split a batch of 60 between two workers.

  let server: TestServer
  let browser: Browser
  const RUNTIME_ID = 'shard-dash:7b'
  let model: string

  beforeAll(async () => {
    ;[server, browser] = await Promise.all([
      startTestServer({
        SHARD_MIN_REQUESTS: '10',
        SHARD_MAX_REQUESTS: '100',
        RATE_LIMIT_LOGIN_PER_MINUTE: '0',
      }),
      launchBrowser(),
    ])
    model = (await makeCatalogEntry(server.deps, { runtime_model_id: RUNTIME_ID, digest: sha(RUNTIME_ID) }))
      .id
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  async function signIn(page: Page, email: string, password: string) {
    await page.goto(server.url)
    await page.getByLabel('Email').fill(email)
    await page.getByLabel('Password').fill(password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('button', { name: 'Sign out' }).waitFor()
  }

  /** A user with a worker key and two shard-capable workers online that host the model. */
  async function fleet(names: string[]) {
    const user = await makeUser(server)
    const key = (await makeWorkerKey(server, user, user.personalOrgId)).key
    const workers: string[] = []
    for (const name of names) {
      const id = await registerWorker(server, key, {
        name,
        models: [RUNTIME_ID],
        max_concurrent_jobs: 4,
        capabilities: { shards: true },
      })
      expect((await heartbeat(server, key, id)).status).toBe(200)
      workers.push(id)
    }
    return { user, key, workers }
  }

  /** A shard's output: one answered line per custom id `req-<first_request+1>` … */
  const shardOutput = (job: Job) =>
    Array.from({ length: job.shard!.requests }, (_, i) =>
      okLine(`req-${job.shard!.first_request + i + 1}`),
    ).join('\n') + '\n'

  const sessions: Session[] = []
  async function session() {
    const s = await openSession(browser, server.url)
    sessions.push(s)
    return s
  }

  test('a split batch: progress bar, throughput, time left and its shards update live to completed', async () => {
    const s = await session()
    const { page } = s
    const { user, key, workers } = await fleet(['shard-box-a', 'shard-box-b'])
    const [a, b] = workers as [string, string]
    const batch = await makeValidatedBatch(server.deps, {
      userId: user.id,
      model,
      requests: 60,
      indexed: true,
    })
    await signIn(page, user.email, user.password)
    await page.goto(`${server.url}/app/batches/${batch.id}`)
    await page.getByText('validated', { exact: true }).first().waitFor()
    const bar = page.getByRole('progressbar', { name: 'Requests done' })
    await eventually(async () => expect(await bar.getAttribute('value')).toBe('0'))
    expect(await bar.getAttribute('max')).toBe('60')
    expect(await page.getByLabel('Time left').textContent()).toBe('—')
    await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }))

    // Each worker claims a shard (guided: the first takes 30 of 60, the second 15 of the 30 left).
    const jobA = (await poll(server, key, a))!
    const jobB = (await poll(server, key, b))!
    expect(jobA.shard).toEqual({ index: 0, first_request: 0, requests: 30 })
    expect(jobB.shard).toEqual({ index: 1, first_request: 30, requests: 15 })
    const shards = page.getByRole('table', { name: 'Shards' })
    for (const column of ['Shard', 'Requests', 'Status', 'Worker', 'Attempts'])
      await shards.getByRole('columnheader', { name: column }).waitFor()
    await shards.getByRole('row', { name: /^1 .*0\/30 running shard-box-a 0$/ }).waitFor()
    await shards.getByRole('row', { name: /^2 .*0\/15 running shard-box-b 0$/ }).waitFor()
    await page.getByText('15 requests not handed out yet', { exact: false }).waitFor()
    await page.getByText('in progress', { exact: true }).first().waitFor()

    // Progress on shard A: the bar, its row, a throughput and an estimate of the time left.
    const progress = await server.req('POST', '/workers/progress', {
      token: key,
      body: {
        worker_id: a,
        job_id: jobA.job_id,
        assignment_id: jobA.assignment_id,
        completed_prompts: 11,
        failed_prompts: 1,
      },
    })
    expect(progress.status).toBe(200)
    await eventually(async () => expect(await bar.getAttribute('value')).toBe('12'))
    await page.getByText('12 of 60 (20%)').waitFor()
    await shards.getByRole('row', { name: /^1 .*12\/30 running shard-box-a/ }).waitFor()
    const throughput = page.getByLabel('Throughput')
    await eventually(async () =>
      expect(await throughput.textContent()).toMatch(/^[1-9][\d,.]* req\/s$|^0\.\d+ req\/s$/),
    )
    await eventually(async () =>
      expect(await page.getByLabel('Time left').textContent()).toMatch(/\d+ (s|min|h)/),
    )
    await s.screenshot('batch-shards')

    // Shard B fails: waiting again, no worker, one attempt; offered again first, so B takes it back.
    const failed = await server.req('POST', '/workers/report-failure', {
      token: key,
      body: { worker_id: b, job_id: jobB.job_id, assignment_id: jobB.assignment_id, error: 'engine crashed' },
    })
    expect(failed.status).toBe(200)
    await shards.getByRole('row', { name: /^2 .*0\/15 waiting — 1$/ }).waitFor()
    await page.getByText('1 running, 0 done, 1 waiting').waitFor()
    const retry = (await poll(server, key, b))!
    expect(retry.shard).toEqual(jobB.shard)
    await shards.getByRole('row', { name: /^2 .*0\/15 running shard-box-b 1$/ }).waitFor()

    // Results for every shard (the rest claimed as the workers ask): rows done, the batch completed.
    const done = await upload(
      server,
      key,
      { worker_id: a, job_id: jobA.job_id, assignment_id: jobA.assignment_id },
      shardOutput(jobA),
    )
    expect(done.status).toBe(200)
    await shards.getByRole('row', { name: /^1 .*30\/30 done shard-box-a 0$/ }).waitFor()
    expect(
      (
        await upload(
          server,
          key,
          { worker_id: b, job_id: retry.job_id, assignment_id: retry.assignment_id },
          shardOutput(retry),
        )
      ).status,
    ).toBe(200)
    for (let job = await poll(server, key, a); job; job = await poll(server, key, a))
      expect(
        (
          await upload(
            server,
            key,
            { worker_id: a, job_id: job.job_id, assignment_id: job.assignment_id },
            shardOutput(job),
          )
        ).status,
      ).toBe(200)
    await page.getByText('completed', { exact: true }).first().waitFor()
    await eventually(async () => expect(await bar.getAttribute('value')).toBe('60'))
    await page.getByText('60 of 60 (100%)').waitFor()
    // Every shard done, on the worker that ran it (the header row aside).
    await eventually(async () => {
      const rows = (await shards.getByRole('row').count()) - 1
      expect(rows).toBeGreaterThanOrEqual(3)
      expect(await shards.getByRole('row', { name: / done shard-box-[ab] \d+$/ }).count()).toBe(rows)
    })
    await shards.getByRole('row', { name: /^2 .*15\/15 done shard-box-b 1$/ }).waitFor()
    expect(await page.getByText('not handed out yet').count()).toBe(0)
    expect(await page.getByLabel('Time left').textContent()).toBe('none, finished')
    expect(await page.evaluate(() => (globalThis as { sameDocument?: boolean }).sameDocument)).toBe(true)
    await s.finish()
  })

  test('a backup copy shows on its shard’s row, and once it finished first, the row says so', async () => {
    const s = await session()
    const { page } = s
    const { user, key, workers } = await fleet(['holder-box', 'spare-box'])
    const [holder, spare] = workers as [string, string]
    const batch = await makeValidatedBatch(server.deps, {
      userId: user.id,
      model,
      requests: 30,
      indexed: true,
    })
    await signIn(page, user.email, user.password)
    await page.goto(`${server.url}/app/batches/${batch.id}`)
    // The holder takes every shard; the spare worker, with nothing left to cut, backs up the oldest
    // (docs/api.md §16 backup copies).
    const held: Job[] = []
    for (let job = await poll(server, key, holder); job; job = await poll(server, key, holder)) held.push(job)
    expect(held.reduce((n, j) => n + j.shard!.requests, 0)).toBe(30)
    const copy = (await poll(server, key, spare))!
    expect(copy).toMatchObject({ job_id: held[0]!.job_id, backup: true })
    const [first, second] = held.map((j) => j.shard!.requests)
    const shards = page.getByRole('table', { name: 'Shards' })
    await shards
      .getByRole('row', { name: new RegExp(`^1 .*0/${first} running holder-box \\+ backup on spare-box 0$`) })
      .waitFor()
    await shards.getByRole('row', { name: new RegExp(`^2 .*0/${second} running holder-box 0$`) }).waitFor()
    const won = await upload(
      server,
      key,
      { worker_id: spare, job_id: copy.job_id, assignment_id: copy.assignment_id },
      shardOutput(copy),
    )
    expect(won.status).toBe(200)
    await shards
      .getByRole('row', {
        name: new RegExp(`^1 .*${first}/${first} done spare-box \\(backup copy, finished first\\) 0$`),
      })
      .waitFor()
    await s.finish()
  })

  test('a batch that runs whole shows its progress but no shards table', async () => {
    const s = await session()
    const { page } = s
    const { user, key, workers } = await fleet(['whole-box'])
    // At most twice SHARD_MIN_REQUESTS: never split.
    const batch = await makeValidatedBatch(server.deps, {
      userId: user.id,
      model,
      requests: 20,
      indexed: true,
    })
    await signIn(page, user.email, user.password)
    await page.goto(`${server.url}/app/batches/${batch.id}`)
    const job = (await poll(server, key, workers[0]!))!
    expect(job.job_id).toBe(batch.id)
    await page.getByText('in progress', { exact: true }).first().waitFor()
    const bar = page.getByRole('progressbar', { name: 'Requests done' })
    expect(await bar.getAttribute('max')).toBe('20')
    await page.getByLabel('Throughput').waitFor()
    expect(await page.getByRole('table', { name: 'Shards' }).count()).toBe(0)
    expect(await page.getByRole('heading', { name: 'Shards' }).count()).toBe(0)
    await s.finish()
  })
})
