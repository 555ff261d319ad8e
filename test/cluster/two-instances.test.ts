import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { manualClock } from '../../src/lib/clock'
import { start as startSweeper } from '../../src/services/sweeper'
import { startTestServer, type TestServer } from '../helpers/app'
import { jsonl, line, uploadForm } from '../helpers/batches'
import { makeWorkerKey, newPassword, uniqueEmail } from '../helpers/builders'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import { rememberSecret } from '../helpers/secrets'
import { openSse } from '../helpers/sse'
import { until } from '../helpers/until'
import { heartbeatBody, okLine, registerBody } from '../helpers/workers'

// docs/api.md §12: two stateless instances on one PostgreSQL database behave as one service.

const MODEL = 'cluster-8b-q4km'
const RUNTIME_MODEL = `${MODEL}:rt`
const SILENT = 'silent-8b-q4km'
// Each test has its own model, so one test's batches are never claimed by another's workers.
const EVENTS = 'events-8b-q4km'
const AVAIL = 'avail-8b-q4km'
const FOLLOW = 'follow-8b-q4km'
describeWith(postgres, 'PostgreSQL cluster', () => {
  let a: TestServer
  let b: TestServer
  let dir: string

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gridkeep-cluster-'))
    const catalogue = join(dir, 'models.yaml')
    writeFileSync(
      catalogue,
      [MODEL, SILENT, EVENTS, AVAIL, FOLLOW]
        .map(
          (id) =>
            `  - id: ${id}\n    task_type: chat\n    quantization: Q4_K_M\n    runtime: ollama\n    runtime_model_id: ${id}:rt\n`,
        )
        .join('')
        .replace(/^/, 'models:\n'),
    )
    // One database and one file store (a shared DATA_DIR/files here; S3 in production).
    const env = {
      DATABASE_URL: await freshPostgresUrl(),
      CATALOGUE_PATH: catalogue,
      DATABASE_POOL_SIZE: '16',
      DATA_DIR: join(dir, 'data'),
    }
    a = await startTestServer(env, { clock: manualClock() })
    b = await startTestServer(env, { clock: manualClock() })
  })
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
    rmSync(dir, { recursive: true, force: true })
  })

  async function signup(on: TestServer) {
    const email = uniqueEmail('cluster')
    const password = newPassword()
    rememberSecret(password)
    expect(
      (await on.req('POST', '/v1/auth/signup', { body: { email, password, full_name: 'C' } })).status,
    ).toBe(200)
    const login = await on.req('POST', '/v1/auth/login', { body: { email, password } })
    const me = await on.req('GET', '/v1/auth/me', { token: login.body.access_token })
    return { token: login.body.access_token as string, orgId: me.body.memberships[0].org_id as string }
  }

  async function uploadFile(on: TestServer, token: string, content: string) {
    const res = await on.req('POST', '/v1/files', { token, raw: uploadForm(content, 'in.jsonl', 'batch') })
    expect(res.status).toBe(200)
    return res.body.id as string
  }

  describe('two instances on one database', () => {
    test('a JWT from one works on the other; so does a key', async () => {
      const user = await signup(a)
      expect((await b.req('GET', '/v1/auth/me', { token: user.token })).status).toBe(200)
      const key = await makeWorkerKey(b, user, user.orgId)
      const reg = await a.req('POST', '/workers/register', { token: key.key, body: registerBody() })
      expect(reg.status).toBe(200)
    })

    test('a batch created on one is validated once and streams its events on the other', async () => {
      const user = await signup(a)
      // Large enough that the validation is still running when the other instance's stream opens.
      const lines = Array.from({ length: 20_000 }, (_, i) =>
        line(`r${i}`, EVENTS, { body: { model: EVENTS, prompt: 'x'.repeat(40) } }),
      )
      const fileId = await uploadFile(a, user.token, jsonl(lines))
      const created = await a.req('POST', '/v1/batches', {
        token: user.token,
        body: { input_file_id: fileId },
      })
      expect(created.status).toBe(200)
      const stream = await openSse(`${b.url}/v1/batches/${created.body.id}/events`, user.token)
      const frames = await stream.rest()
      expect(frames[0]).toEqual({
        event: 'status',
        data: { batch_id: created.body.id, status: expect.any(String) },
      })
      expect(frames.at(-1)).toMatchObject({
        event: 'done',
        data: { batch_id: created.body.id, status: 'validated', request_counts: { total: 20_000 } },
      })
      const lines_a = (await a.deps.metrics.validationLines.get()).values[0]?.value ?? 0
      const lines_b = (await b.deps.metrics.validationLines.get()).values[0]?.value ?? 0
      // Validated once, by the instance that took the batch.
      expect(lines_a + lines_b).toBe(20_000)
    }, 120_000)

    test('64 pollers across both instances drain 1,000 batches, each claimed exactly once', async () => {
      const user = await signup(a)
      const key = await makeWorkerKey(a, user, user.orgId)
      const fileId = await uploadFile(a, user.token, jsonl([line('only', MODEL)]))
      const ids: string[] = []
      for (let i = 0; i < 1000; i++) {
        const on = i % 2 ? b : a
        const res = await on.req('POST', '/v1/batches', {
          token: user.token,
          body: { input_file_id: fileId },
        })
        ids.push(res.body.id)
      }
      await until(
        'validation of 1,000 batches',
        async () => {
          const page = await a.req('GET', '/v1/batches?status=validating&limit=1', { token: user.token })
          return page.body.data.length === 0
        },
        60_000,
      )
      const servers = [a, b]
      const workers = await Promise.all(
        Array.from({ length: 8 }, async (_, w) => {
          const on = servers[w % 2]!
          const reg = await on.req('POST', '/workers/register', {
            token: key.key,
            body: registerBody({ name: `w${w}`, models: [RUNTIME_MODEL], max_concurrent_jobs: 8 }),
          })
          await on.req('POST', `/workers/${reg.body.worker_id}/heartbeat`, {
            token: key.key,
            body: heartbeatBody(),
          })
          return { id: reg.body.worker_id as string, on }
        }),
      )
      const claimed: string[] = []
      await Promise.all(
        Array.from({ length: 64 }, async (_, p) => {
          const w = workers[p % 8]!
          const on = servers[p % 2]!
          for (;;) {
            const res = await on.req('POST', '/workers/poll', { token: key.key, body: { worker_id: w.id } })
            expect(res.status).toBe(200)
            const job = res.body.job
            if (!job) return
            claimed.push(job.job_id)
            const up = new FormData()
            for (const [k, v] of Object.entries({
              job_id: job.job_id,
              worker_id: w.id,
              assignment_id: job.assignment_id,
            }))
              up.append(k, v)
            up.append('file', new Blob([okLine('only')], { type: 'application/jsonl' }), 'out.jsonl')
            const done = await servers[(p + 1) % 2]!.req('POST', '/workers/upload-results', {
              token: key.key,
              raw: up,
            })
            expect(done.status, `${(p + 1) % 2} ${JSON.stringify(done.body)}`).toBe(200)
          }
        }),
      )
      expect(claimed.length).toBe(1000)
      expect(new Set(claimed)).toEqual(new Set(ids))
    }, 300_000)

    test('GET /v1/models on one instance follows a worker that comes to serve through the other', async () => {
      const user = await signup(a)
      const key = await makeWorkerKey(a, user, user.orgId)
      const listed = async (on: TestServer) =>
        (
          (await on.req('GET', '/v1/models', { token: user.token })).body.data as {
            id: string
            available: boolean
          }[]
        ).find((m) => m.id === AVAIL)?.available
      const one = async (on: TestServer) =>
        (await on.req('GET', `/v1/models/${AVAIL}`, { token: user.token })).body.available
      // b answers from its kept view; nothing on b changes, and its clock stands still.
      expect(await listed(b)).toBe(false)
      expect(await one(b)).toBe(false)
      const reg = await a.req('POST', '/workers/register', {
        token: key.key,
        body: registerBody({ models: [`${AVAIL}:rt`] }),
      })
      expect(reg.status).toBe(200)
      expect(await listed(a)).toBe(true)
      // The registration's signal reaches b, whose next answer is read afresh.
      await until('the other instance to see the new worker', async () => (await listed(b)) === true, 10_000)
      expect(await one(b)).toBe(true)
    })

    test('a follow stream on one instance sees why the batch waits, and its claim, change through the other', async () => {
      const user = await signup(a)
      const key = await makeWorkerKey(a, user, user.orgId)
      const fileId = await uploadFile(a, user.token, jsonl([line('f', FOLLOW)]))
      const batch = (
        await a.req('POST', '/v1/batches', { token: user.token, body: { input_file_id: fileId } })
      ).body
      await until(
        'validation',
        async () =>
          (await a.req('GET', `/v1/batches/${batch.id}`, { token: user.token })).body.status === 'validated',
        60_000,
      )
      // docs/api.md §6 Events: b re-reads the batch from the database, whatever signals arrive.
      const stream = await openSse(`${b.url}/v1/batches/${batch.id}/events?follow=1`, user.token)
      const done = (await stream.until('done')).at(-1)!
      expect(done.data.waiting).toMatchObject({ reason: 'no_worker', details: { offline_workers: 0 } })
      const reg = await a.req('POST', '/workers/register', {
        token: key.key,
        body: registerBody({ name: 'follow-box', models: [`${FOLLOW}:rt`] }),
      })
      expect(reg.status).toBe(200)
      const workerId = reg.body.worker_id as string
      expect((await stream.until('waiting')).at(-1)!.data.waiting).toMatchObject({
        reason: 'queued',
        details: { workers: 1 },
      })
      const job = (await a.req('POST', '/workers/poll', { token: key.key, body: { worker_id: workerId } }))
        .body.job
      expect(job.job_id).toBe(batch.id)
      expect(await stream.until('waiting')).toEqual([
        { event: 'status', data: { batch_id: batch.id, status: 'in_progress' } },
        { event: 'waiting', data: { batch_id: batch.id, waiting: null } },
      ])
      stream.close()
    })

    test('a silent worker’s batch is requeued once, with attempts exactly 1, though both sweepers run', async () => {
      const user = await signup(b)
      const key = await makeWorkerKey(b, user, user.orgId)
      const fileId = await uploadFile(b, user.token, jsonl([line('s', SILENT)]))
      const batch = (
        await b.req('POST', '/v1/batches', { token: user.token, body: { input_file_id: fileId } })
      ).body
      await until(
        'validation',
        async () =>
          (await b.req('GET', `/v1/batches/${batch.id}`, { token: user.token })).body.status === 'validated',
        60_000,
      )
      const reg = await a.req('POST', '/workers/register', {
        token: key.key,
        body: registerBody({ models: [`${SILENT}:rt`] }),
      })
      const workerId = reg.body.worker_id as string
      const job = (await a.req('POST', '/workers/poll', { token: key.key, body: { worker_id: workerId } }))
        .body.job
      expect(job.job_id).toBe(batch.id)
      // Both instances' clocks move past the startup grace and the heartbeat timeout; both sweepers tick.
      for (const s of [a, b]) s.clock.advance(10_000)
      const fire: (() => unknown)[] = []
      const stops = [a, b].map((s) =>
        startSweeper(s.deps, (_ms, fn) => {
          fire.push(fn)
          return () => {}
        }),
      )
      await Promise.all(fire.map((f) => f()))
      for (const stop of stops) stop()
      const after = (await a.req('GET', `/v1/batches/${batch.id}`, { token: user.token })).body
      expect(after).toMatchObject({ status: 'validated', attempts: 1 })
    })
  })
})
