import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { eq } from 'drizzle-orm'
import type { Browser, Page } from 'playwright-core'
import { startTestServer, type TestServer } from '../helpers/app'
import { launchBrowser, openSession, type Session } from '../helpers/browser'
import { makeSuperadmin, makeUser } from '../helpers/builders'
import { chromium, describeWith } from '../helpers/requires'
import { rowsOf } from '../helpers/rows'
import { eventually } from '../helpers/until'
import {
  errorLine,
  heartbeat,
  inputLine,
  inventoryItem,
  makeCatalogEntry,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  sha,
  upload,
} from '../helpers/workers'

// A person's flows through the dashboard (issue 9), in a real browser against a real server, by
// accessible name (docs/api.md §11's words). Each session fails on another origin, a console error, or
// anything in localStorage (test/helpers/browser.ts).

// A real browser against a real server: slower than the suite's default on a shared machine.
setDefaultTimeout(90_000)
describeWith(chromium, 'dashboard flows in a browser', () => {
  let server: TestServer
  let browser: Browser
  let model: string
  const MAX_UPLOAD_BYTES = 64 * 1024

  beforeAll(async () => {
    ;[server, browser] = await Promise.all([
      startTestServer({
        MAX_UPLOAD_BYTES: String(MAX_UPLOAD_BYTES),
        RATE_LIMIT_LOGIN_PER_MINUTE: '0',
        RATE_LIMIT_KEYS_PER_MINUTE: '0',
        PUBLIC_URL: 'http://gridkeep.lab.example',
      }),
      launchBrowser(),
    ])
    model = (
      await makeCatalogEntry(server.deps, {
        id: 'dash-model-q4km',
        runtime_model_id: 'dash:7b',
        digest: sha('dash:7b'),
      })
    ).id
  })
  afterAll(async () => {
    await browser?.close()
    await server?.stop()
  })

  let sessions: Session[] = []
  async function session(): Promise<Session> {
    const s = await openSession(browser, server.url)
    sessions.push(s)
    return s
  }
  /** Every session opened by a test is checked (and closed) before the next test. */
  async function finishAll() {
    const open = sessions
    sessions = []
    for (const s of open) await s.finish()
  }

  async function signIn(page: Page, email: string, password: string) {
    await page.goto(server.url)
    await page.getByLabel('Email').fill(email)
    await page.getByLabel('Password').fill(password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('button', { name: 'Sign out' }).waitFor()
  }

  const text = (page: Page, s: string | RegExp) => page.getByText(s).first().waitFor()
  const nav = (page: Page, name: string) =>
    page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name }).click()

  describe('accounts', () => {
    test('create account, bad input kept by its control, sign out, sign in', async () => {
      const s = await session()
      const { page } = s
      s.allowStatus(400, 401, 409)
      const taken = await makeUser(server)
      await page.goto(server.url)
      await page.getByRole('link', { name: 'Create account' }).click()
      await page.getByLabel('Full name').fill('N'.repeat(201))
      await page.getByLabel('Email').fill(taken.email)
      await page.getByLabel('Password').fill('a-good-password')
      await page.getByRole('button', { name: 'Create account' }).click()
      // An over-long name is refused by the server and said in words.
      await page.getByRole('alert').first().waitFor()
      expect(await page.getByLabel('Full name').inputValue()).toBe('N'.repeat(201))
      await page.getByLabel('Full name').fill('Ada Lovelace')
      await page.getByRole('button', { name: 'Create account' }).click()
      await text(page, 'This email is already registered')
      expect(await page.getByLabel('Email').inputValue()).toBe(taken.email)
      const email = `ada-${Date.now()}@example.test`
      await page.getByLabel('Email').fill(email)
      await page.getByRole('button', { name: 'Create account' }).click()
      await page.getByRole('heading', { name: 'Batches' }).waitFor()
      await s.screenshot('batches-empty')

      await page.getByRole('button', { name: 'Sign out' }).click()
      await page.getByRole('button', { name: 'Sign in' }).waitFor()
      expect(await page.evaluate(() => sessionStorage.length)).toBe(0)

      await page.getByLabel('Email').fill(email)
      await page.getByLabel('Password').fill('a-wrong-password')
      await page.getByRole('button', { name: 'Sign in' }).click()
      await text(page, 'Incorrect email or password')
      expect(await page.getByLabel('Email').inputValue()).toBe(email)
      await page.getByLabel('Password').fill('a-good-password')
      await page.getByRole('button', { name: 'Sign in' }).click()
      await page.getByRole('heading', { name: 'Batches' }).waitFor()
      await finishAll()
    })

    test('forgot and reset the password through the mail', async () => {
      const s = await session()
      const { page } = s
      s.allowStatus(400)
      const user = await makeUser(server)
      await page.goto(server.url)
      await page.getByRole('link', { name: 'Forgot password?' }).click()
      await page.getByLabel('Email').fill(user.email)
      await page.getByRole('button', { name: 'Send reset link' }).click()
      await text(page, /a reset link is on its way/)
      const mail = await eventually(() => {
        const m = server.mail.sent.find((x) => x.to === user.email)
        expect(m).toBeDefined()
        return m!
      })
      const link = /http:\/\/gridkeep\.lab\.example(\/reset-password\?token=[\w-]+)/.exec(mail.text)![1]!
      // The mail links to PUBLIC_URL; the same path on this server is the page.
      await page.goto(server.url + link)
      await page.getByLabel('New password').fill('short')
      await page.getByRole('button', { name: 'Set password' }).click()
      await page.getByRole('alert').first().waitFor()
      await page.getByLabel('New password').fill('a-reset-password')
      await page.getByRole('button', { name: 'Set password' }).click()
      await text(page, /Your password is set/)
      // Single use (docs/api.md §2): the same link again is refused in words.
      await page.goto(server.url + link)
      await page.getByLabel('New password').fill('another-password')
      await page.getByRole('button', { name: 'Set password' }).click()
      await text(page, 'This reset token is unknown, used or expired')
      await signIn(page, user.email, 'a-reset-password')
      await finishAll()
    })

    test('a revoked session (401 from the API) goes back to sign-in with a message', async () => {
      const s = await session()
      const { page } = s
      s.allowStatus(401)
      const user = await makeUser(server)
      await signIn(page, user.email, user.password)
      // The Keys page refreshes nothing on its own: the 401 comes from the person's action.
      await nav(page, 'Keys')
      await page.getByText('No key yet.').waitFor()
      // Changing the password elsewhere ends every older JWT (docs/api.md §1).
      const changed = await server.req('POST', '/v1/auth/change-password', {
        token: user.token,
        body: { current_password: user.password, new_password: 'changed-elsewhere-1' },
      })
      expect(changed.status).toBe(200)
      await page.getByLabel('Name').fill('after-revocation')
      await page.getByRole('button', { name: 'Create key' }).click()
      await text(page, 'Your session has ended. Sign in again.')
      await page.getByRole('button', { name: 'Sign in' }).waitFor()
      expect(await page.evaluate(() => sessionStorage.length)).toBe(0)
      await finishAll()
    })
    test('a team organization: create it, add a member (an unknown email said by the control), change a role', async () => {
      const s = await session()
      const { page } = s
      s.allowStatus(404)
      const owner = await makeUser(server)
      const colleague = await makeUser(server)
      await signIn(page, owner.email, owner.password)
      await nav(page, 'Organizations')
      await page.getByLabel('Organization name').fill('Vision lab')
      await page.getByRole('button', { name: 'Create organization' }).click()
      await page.getByRole('link', { name: 'Vision lab' }).click()
      await page.getByLabel('Member email').fill('nobody@example.test')
      await page.getByRole('button', { name: 'Add member' }).click()
      await text(page, 'No user with this email')
      expect(await page.getByLabel('Member email').inputValue()).toBe('nobody@example.test')
      await page.getByLabel('Member email').fill(colleague.email)
      await page.getByRole('button', { name: 'Add member' }).click()
      const members = page.getByRole('table', { name: 'Members' })
      await members.getByRole('row', { name: new RegExp(colleague.email) }).waitFor()
      await page.getByLabel(`Role of ${colleague.email}`).selectOption('admin')
      await eventually(async () => {
        const orgs = (await server.req('GET', '/v1/orgs', { token: colleague.token })).body.data
        expect(orgs.find((o: { name: string }) => o.name === 'Vision lab')?.role).toBe('admin')
      })
      await s.screenshot('organization')
      await finishAll()
    })
  })

  describe('keys, workers and a batch from upload to download', () => {
    test('personal key shown once and revoked; worker key; a worker online; a batch validated live, completed, downloaded', async () => {
      const s = await session()
      const { page } = s
      const user = await makeUser(server)
      await signIn(page, user.email, user.password)

      await nav(page, 'Keys')
      await page.getByLabel('Name').fill('laptop')
      await page.getByRole('button', { name: 'Create key' }).click()
      const shown = page.getByRole('status', { name: 'New key' })
      await shown.getByRole('button', { name: 'Copy' }).waitFor()
      const personal = (await shown.locator('code').textContent())!
      expect(personal).toMatch(/^gk-[0-9A-Za-z]{40}$/)
      await s.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url })
      await shown.getByRole('button', { name: 'Copy' }).click()
      await shown.getByText('Copied.').waitFor()
      expect(await page.evaluate(() => (globalThis as any).navigator.clipboard.readText())).toBe(personal)
      expect((await server.req('GET', '/v1/models', { token: personal })).status).toBe(200)
      await s.screenshot('keys')
      await shown.getByRole('button', { name: 'Done' }).click()
      // Shown once: gone from the page, only the prefix is listed.
      expect(await page.getByText(personal).count()).toBe(0)
      await page
        .getByRole('row', { name: /laptop/ })
        .getByRole('button', { name: 'Revoke' })
        .click()
      await page
        .getByRole('row', { name: /laptop/ })
        .getByText(/revoked/)
        .waitFor()
      expect((await server.req('GET', '/v1/models', { token: personal })).status).toBe(401)

      await nav(page, 'Organizations')
      await page.getByRole('link', { name: /Personal Org/ }).click()
      await page.getByLabel('Name').fill('rack-1')
      await page.getByRole('button', { name: 'Create worker key' }).click()
      const workerKey = (await page.getByRole('status', { name: 'New key' }).locator('code').textContent())!
      expect(workerKey).toMatch(/^gk-/)

      // A simulated worker speaks the /workers protocol with that key.
      const workerId = await registerWorker(server, workerKey, { name: 'gpu-box-1' })
      const beat = await heartbeat(server, workerKey, workerId, {
        inventory: [inventoryItem('dash:7b')],
        concurrency: 12,
      })
      expect(beat.status).toBe(200)
      await nav(page, 'Workers')
      const row = page.getByRole('row', { name: /gpu-box-1/ })
      await row.getByText('online').waitFor()
      await row.getByText('1 / 24 GB').waitFor()
      await row.getByText(/RTX 4090/).waitFor()
      // The requests in flight the daemon settled on (docs/api.md §16).
      await page.getByRole('columnheader', { name: 'Concurrency' }).waitFor()
      await row.getByRole('cell', { name: '12', exact: true }).waitFor()
      await page.getByRole('img', { name: 'Queue depth and throughput over the last hour' }).waitFor()
      await s.screenshot('workers')
      // Live (docs/api.md §11, at least every 5 s): a worker that comes online appears without a reload.
      await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }))
      const second = await registerWorker(server, workerKey, { name: 'gpu-box-2' })
      expect((await heartbeat(server, workerKey, second, { activity: 'busy' })).status).toBe(200)
      await page
        .getByRole('row', { name: /gpu-box-2/ })
        .getByText('busy')
        .waitFor({ timeout: 12_000 })
      expect(await page.evaluate(() => (globalThis as { sameDocument?: boolean }).sameDocument)).toBe(true)

      await nav(page, 'Models')
      await page
        .getByRole('row', { name: /dash-model-q4km/ })
        .getByText('available')
        .waitFor()

      // Upload: the browser checks the file first, then the batch validates live.
      await nav(page, 'Batches')
      await page.getByRole('button', { name: 'New batch' }).click()
      const lines = ['q1', 'q2', 'q3'].map((id) => inputLine(id, model)).join('\n') + '\n'
      await page
        .getByLabel('JSONL file')
        .setInputFiles({ name: 'requests.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from(lines) })
      await page
        .getByRole('status', { name: 'File check' })
        .getByText(/3 request lines, model dash-model-q4km/)
        .waitFor()
      await s.screenshot('new-batch')
      await page.getByRole('button', { name: 'Create batch' }).click()
      await page.getByRole('heading', { name: /^Batch batch_/ }).waitFor()
      const batchId = new URL(page.url()).pathname.split('/').pop()!
      await text(page, 'validated')
      await text(page, '0 completed, 0 failed of 3')

      const job = await poll(server, workerKey, workerId)
      expect(job?.job_id).toBe(batchId)
      await text(page, 'in progress')
      const done = await upload(
        server,
        workerKey,
        { worker_id: workerId, job_id: batchId, assignment_id: job!.assignment_id, completed: 2, failed: 1 },
        [okLine('q1'), okLine('q2'), errorLine('q3')].join('\n') + '\n',
      )
      expect(done.status).toBe(200)
      await text(page, '2 completed, 1 failed of 3')
      await page.getByText('completed', { exact: true }).first().waitFor()
      await s.screenshot('batch-detail')

      const [output] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('link', { name: 'Download output' }).click(),
      ])
      const outputText = readFileSync((await output.path())!, 'utf8')
      expect(
        outputText
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l).custom_id),
      ).toEqual(['q1', 'q2'])
      const [errors] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('link', { name: 'Download errors' }).click(),
      ])
      expect(JSON.parse(readFileSync((await errors.path())!, 'utf8').trim()).custom_id).toBe('q3')

      await nav(page, 'Files')
      await page
        .getByRole('row', { name: /requests\.jsonl/ })
        .getByText('batch', { exact: true })
        .waitFor()
      await page.getByRole('cell', { name: `${batchId}_output.jsonl` }).waitFor()
      await page.getByRole('cell', { name: `${batchId}_error.jsonl` }).waitFor()

      await nav(page, 'Batches')
      const listed = page.getByRole('row', { name: new RegExp(batchId) })
      await listed.getByText('2/3').waitFor()
      await page.getByLabel('Status').selectOption('failed')
      await eventually(async () =>
        expect(await page.getByRole('row', { name: new RegExp(batchId) }).count()).toBe(0),
      )

      // Usage (docs/api.md §14): the two answered requests' tokens (okLine: 5 + 7 each), by UTC day (the
      // server's default range: the last 30 days by its clock), model and creating key, as a chart
      // and a table; the organization whose worker ran it sees the same work.
      await nav(page, 'Usage')
      const table = page.getByRole('table', { name: 'Usage' })
      const today = new Date(server.clock.now() * 1000).toISOString().slice(0, 10)
      await table.getByRole('row', { name: `${today} 1 2 10 0 14 24`, exact: true }).waitFor()
      await page.getByRole('img', { name: 'Tokens per day' }).waitFor()
      expect(await page.getByLabel('To', { exact: true }).inputValue()).toBe(today)
      await s.screenshot('usage')
      await page.getByLabel('Group by').selectOption('model')
      await table.getByRole('row', { name: `${model} 1 2 10 0 14 24`, exact: true }).waitFor()
      // Created from the dashboard (a JWT), so the key is "dashboard".
      await page.getByLabel('Group by').selectOption('key')
      await table.getByRole('row', { name: 'dashboard 1 2 10 0 14 24', exact: true }).waitFor()
      const [csv] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('button', { name: 'Download CSV' }).click(),
      ])
      const csvLines = readFileSync((await csv.path())!, 'utf8')
        .trim()
        .split('\n')
      expect(csvLines[0]).toBe(
        'start,end,key,batches,requests,prompt_tokens,cached_tokens,completion_tokens,total_tokens',
      )
      expect(csvLines.slice(1).map((l) => l.split(',').slice(2).join(','))).toEqual([
        'dashboard,1,2,10,0,14,24',
      ])
      await page.getByLabel('View').selectOption({ label: "Organization: Test User's Personal Org" })
      // An organization's view offers day and model only; the key grouping falls back to days.
      await table.getByRole('row', { name: `${today} 1 2 10 0 14 24`, exact: true }).waitFor()
      expect(await page.getByLabel('Group by').locator('option').allTextContents()).toEqual(['Day', 'Model'])
      // A reversed range: the API's words next to the control that caused it.
      s.allowStatus(400)
      const tomorrow = new Date((server.clock.now() + 86_400) * 1000).toISOString().slice(0, 10)
      await page.getByLabel('From', { exact: true }).fill(tomorrow)
      await page.getByText("'start' must be before 'end'").waitFor()
      expect(await page.getByLabel('From', { exact: true }).getAttribute('aria-invalid')).toBe('true')
      await page.getByLabel('From', { exact: true }).fill(today)
      await table.getByRole('row', { name: `${today} 1 2 10 0 14 24`, exact: true }).waitFor()
      expect(await page.getByRole('alert').count()).toBe(0)
      await finishAll()
    })

    test('a validating batch shows the validator progress from the events stream, then its outcome, without a reload', async () => {
      const s = await session()
      const { page } = s
      const user = await makeUser(server)
      // Inserted after the validator's start-up scan and without its wake-up signal: it stays
      // validating, and this test plays the validator's part on the event bus.
      const batch = await makeValidatedBatch(server.deps, {
        userId: user.id,
        model,
        requests: 2,
        status: 'validating',
      })
      await signIn(page, user.email, user.password)
      await page.goto(`${server.url}/app/batches/${batch.id}`)
      await text(page, 'validating')
      await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }))
      await eventually(() => expect(server.deps.batchEvents.listenerCount(batch.id)).toBe(1))
      server.deps.batchEvents.publish(batch.id, {
        event: 'progress',
        data: { lines_read: 1234, errors_total: 1 },
      })
      await text(page, '1,234 lines read, 1 error')
      server.deps.batchEvents.publish(batch.id, {
        event: 'progress',
        data: { lines_read: 2345, errors_total: 2 },
      })
      await text(page, '2,345 lines read, 2 errors')
      const { db, tables } = rowsOf(server.deps)
      await db.update(tables.batches).set({ status: 'validated' }).where(eq(tables.batches.id, batch.id))
      const counts = { total: 2, completed: 0, failed: 0 }
      server.deps.batchEvents.publish(batch.id, {
        event: 'done',
        data: { batch_id: batch.id, status: 'validated', request_counts: counts, errors_total: 0 },
      })
      await text(page, 'validated')
      await text(page, '0 completed, 0 failed of 2')
      // The stream ended and was let go; the page never reloaded.
      await eventually(() => expect(server.deps.batchEvents.listenerCount(batch.id)).toBe(0))
      expect(await page.evaluate(() => (globalThis as { sameDocument?: boolean }).sameDocument)).toBe(true)
      await finishAll()
    })

    test('an invalid file: the browser check and the server validation show its errors by line', async () => {
      const s = await session()
      const { page } = s
      const user = await makeUser(server)
      await signIn(page, user.email, user.password)
      await page.getByRole('button', { name: 'New batch' }).click()
      const content = [
        inputLine('a', model),
        '{not json',
        inputLine('a', model),
        JSON.stringify({ custom_id: 'b', body: { model: 'no-such-model' } }),
      ].join('\n')
      await page
        .getByLabel('JSONL file')
        .setInputFiles({ name: 'bad.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from(content) })
      const check = page.getByRole('status', { name: 'File check' })
      await check.getByText('Line 2: not valid JSON').waitFor()
      await check.getByText('Line 3: custom_id "a" repeats an earlier line').waitFor()
      await check.getByText(/Line 4: body.model "no-such-model" differs/).waitFor()
      await page.getByRole('button', { name: 'Create batch' }).click()
      await text(page, 'failed')
      const table = page.getByRole('table', { name: 'Validation errors' })
      for (const column of ['Line', 'Field', 'Code', 'Message'])
        await table.getByRole('columnheader', { name: column }).waitFor()
      await table.getByRole('row', { name: /^2 .*invalid_json/ }).waitFor()
      await table.getByRole('row', { name: /^3 custom_id duplicate_custom_id/ }).waitFor()
      await table.getByRole('row', { name: /^4 body\.model unsupported_model/ }).waitFor()
      await s.screenshot('batch-errors')
      await finishAll()
    })

    test('a /v1/responses batch: the chooser offers it, and the browser check and the server apply its body rules', async () => {
      const s = await session()
      const { page } = s
      const user = await makeUser(server)
      await signIn(page, user.email, user.password)
      await page.getByRole('button', { name: 'New batch' }).click()
      await page.getByLabel('Endpoint').selectOption('/v1/responses')
      const resp = (id: string, body: Record<string, unknown>) =>
        JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/responses', body: { model, ...body } })
      const content = [
        resp('a', { input: 'Say hello', max_output_tokens: 16 }),
        resp('b', { stream: true }),
      ].join('\n')
      await page.getByLabel('JSONL file').setInputFiles({
        name: 'responses.jsonl',
        mimeType: 'application/jsonl',
        buffer: Buffer.from(content),
      })
      const check = page.getByRole('status', { name: 'File check' })
      await check.getByText('Line 2: body.input is required').waitFor()
      await check
        .getByText('Line 2: A batch request cannot stream: omit body.stream or set it to false')
        .waitFor()
      expect(await check.getByRole('listitem').count()).toBe(2)
      await page.getByRole('button', { name: 'Create batch' }).click()
      await page.getByRole('heading', { name: /^Batch batch_/ }).waitFor()
      await text(page, 'failed')
      await page.getByText('/v1/responses', { exact: true }).waitFor()
      const table = page.getByRole('table', { name: 'Validation errors' })
      await table.getByRole('row', { name: /^2 body\.input missing_field/ }).waitFor()
      await table.getByRole('row', { name: /^2 body\.stream unsupported_value/ }).waitFor()
      // The header and the two errors: the lines' url matched the batch's endpoint.
      expect(await table.getByRole('row').count()).toBe(3)
      await finishAll()
    })

    test('a non-JSONL file and a file over the size limit are refused in words, and the form stays usable', async () => {
      const s = await session()
      const { page } = s
      s.allowStatus(413)
      const user = await makeUser(server)
      await signIn(page, user.email, user.password)
      await page.getByRole('button', { name: 'New batch' }).click()
      const file = page.getByLabel('JSONL file')
      await file.setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hello') })
      await text(page, 'Choose a .jsonl file: one JSON request per line.')
      expect(await page.getByRole('button', { name: 'Create batch' }).isDisabled()).toBe(true)
      const line = inputLine('big', model)
      const big = Array.from({ length: Math.ceil((MAX_UPLOAD_BYTES * 1.5) / line.length) }, (_, i) =>
        inputLine(`big-${i}`, model),
      ).join('\n')
      await file.setInputFiles({ name: 'big.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from(big) })
      await page
        .getByRole('status', { name: 'File check' })
        .getByText(/No problem found/)
        .waitFor()
      await page.getByRole('button', { name: 'Create batch' }).click()
      await page.getByRole('alert').getByText(`Files are limited to ${MAX_UPLOAD_BYTES} bytes`).waitFor()
      // Another file clears the message; nothing was created.
      await file.setInputFiles({ name: 'ok.jsonl', mimeType: 'application/jsonl', buffer: Buffer.from(line) })
      await page
        .getByRole('status', { name: 'File check' })
        .getByText(/1 request line,/)
        .waitFor()
      expect(await page.getByRole('alert').count()).toBe(0)
      expect(await page.getByRole('button', { name: 'Create batch' }).isEnabled()).toBe(true)
      expect((await server.req('GET', '/v1/batches', { token: user.token })).body.data).toEqual([])
      await finishAll()
    })
  })

  describe('admin', () => {
    test('a superadmin lists users, organizations and every worker, adds a user and deactivates one', async () => {
      const s = await session()
      const { page } = s
      const admin = await makeSuperadmin(server)
      const victim = await makeUser(server)
      await signIn(page, admin.email, admin.password)
      await nav(page, 'Admin')
      const users = page.getByRole('table', { name: 'Users' })
      await users.waitFor()
      await page.getByRole('table', { name: 'All organizations' }).waitFor()
      await page.getByRole('region', { name: 'Every worker' }).waitFor()
      await s.screenshot('admin')
      // Add a user; a taken email is said by its control.
      s.allowStatus(409)
      const added = page.getByRole('form', { name: 'Add user' })
      await added.getByLabel('Full name').fill('Grace Hopper')
      await added.getByLabel('Email').fill(victim.email)
      await added.getByLabel('First password').fill('first-password-1')
      await added.getByRole('button', { name: 'Add user' }).click()
      await added.getByText('This email is already registered').waitFor()
      const grace = `grace-${Date.now()}@example.test`
      await added.getByLabel('Email').fill(grace)
      await added.getByRole('button', { name: 'Add user' }).click()
      await users.getByRole('row', { name: new RegExp(grace) }).waitFor()
      const login = await server.req('POST', '/v1/auth/login', {
        body: { email: grace, password: 'first-password-1' },
      })
      expect(login.body.must_change_password).toBe(true)
      // Paged, newest first: the user made last is on the first page.
      const row = users.getByRole('row', { name: new RegExp(victim.email) })
      await row.getByRole('button', { name: 'Deactivate' }).click()
      // exact: a name is otherwise matched as a substring, and 'Deactivate' contains 'activate'.
      await row.getByRole('button', { name: 'Activate', exact: true }).waitFor()
      expect((await server.req('GET', '/v1/auth/me', { token: victim.token })).status).toBe(401)
      // A superadmin's usage view covers everyone, grouped by user too.
      await nav(page, 'Usage')
      await page.getByLabel('View').selectOption({ label: 'Everyone' })
      await page.getByLabel('Group by').selectOption('user')
      // What the page shows is what the API answers (the batches earlier tests completed, if any).
      const everyone = (await server.req('GET', '/v1/admin/usage?group_by=user', { token: admin.token })).body
        .data
      if (everyone.length === 0) await text(page, 'No completed batch in this range.')
      else {
        const usage = page.getByRole('table', { name: 'Usage' })
        for (const row of everyone) await usage.getByRole('cell', { name: row.email, exact: true }).waitFor()
        expect(await usage.getByRole('row').count()).toBe(everyone.length + 2) // with the header and the total
      }
      await finishAll()
    })

    test('Admin is neither linked nor shown to a user', async () => {
      const s = await session()
      const { page } = s
      const user = await makeUser(server)
      await signIn(page, user.email, user.password)
      expect(await page.getByRole('link', { name: 'Admin' }).count()).toBe(0)
      await page.goto(`${server.url}/app/admin`)
      await text(page, 'No such page. Pick one from the menu.')
      // Usage: their own and their organization's, never everyone's.
      await nav(page, 'Usage')
      await text(page, 'No completed batch in this range.')
      expect(await page.getByLabel('View').locator('option').allTextContents()).toEqual([
        'My usage',
        "Organization: Test User's Personal Org",
      ])
      await finishAll()
    })
  })
})
