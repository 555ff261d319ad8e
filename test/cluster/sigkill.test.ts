import { afterAll, expect } from 'bun:test'
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { SQL } from 'bun'
import { buildRequest, readRes } from '../helpers/app'
import { jsonl, line, uploadForm } from '../helpers/batches'
import { baseEnv, type ServerProcess, startServerProcess, tempDir } from '../helpers/ops'
import { freshPostgresUrl } from '../helpers/postgres'
import { postgres, testWith } from '../helpers/requires'
import { heartbeatBody, okLine, registerBody } from '../helpers/workers'

// docs/api.md §12: two instances (real processes) on one PostgreSQL database and one file store; one is
// SIGKILLed in the middle of a claim and upload storm. Nothing is lost: every batch ends completed
// exactly once, with its output file, and no batch is left half-written.

const MODEL = 'storm-8b-q4km'
const BATCHES = 120
const dir = tempDir('sigkill')
const procs: ServerProcess[] = []
afterAll(() => {
  for (const p of procs) p.proc.kill(9)
  rmSync(dir, { recursive: true, force: true })
})

const req = async (
  url: string,
  method: string,
  path: string,
  opts: Parameters<typeof buildRequest>[3] = {},
) => readRes(await fetch(buildRequest(url, method, path, opts)))

testWith(
  postgres,
  'SIGKILL of one instance in a claim/upload storm loses nothing',
  async () => {
    const catalogue = join(dir, 'models.yaml')
    writeFileSync(
      catalogue,
      `models:\n  - id: ${MODEL}\n    task_type: chat\n    quantization: Q4_K_M\n    runtime: ollama\n    runtime_model_id: storm:rt\n`,
    )
    const databaseUrl = await freshPostgresUrl()
    const env = baseEnv(join(dir, 'data'), {
      DATABASE_URL: databaseUrl,
      JWT_SECRET: 's'.repeat(40),
      CATALOGUE_PATH: catalogue,
    })
    const a = await startServerProcess(env)
    const b = await startServerProcess(env)
    procs.push(a, b)

    const email = 'storm@example.test'
    const password = 'storm-password-1'
    expect(
      (await req(a.url, 'POST', '/v1/auth/signup', { body: { email, password, full_name: 'S' } })).status,
    ).toBe(200)
    const token = (await req(b.url, 'POST', '/v1/auth/login', { body: { email, password } })).body
      .access_token
    const orgId = (await req(a.url, 'GET', '/v1/auth/me', { token })).body.memberships[0].org_id
    const key = (await req(b.url, 'POST', `/v1/orgs/${orgId}/api-keys`, { token, body: { name: 'storm' } }))
      .body.key
    const upload = await req(a.url, 'POST', '/v1/files', {
      token,
      raw: uploadForm(jsonl([line('only', MODEL)]), 'in.jsonl', 'batch'),
    })
    const ids = new Set<string>()
    for (let i = 0; i < BATCHES; i++) {
      const res = await req(i % 2 ? a.url : b.url, 'POST', '/v1/batches', {
        token,
        body: { input_file_id: upload.body.id },
      })
      ids.add(res.body.id)
    }
    for (;;) {
      const page = await req(b.url, 'GET', '/v1/batches?status=validating&limit=1', { token })
      if (page.body.data.length === 0) break
      await Bun.sleep(20)
    }

    const workers: string[] = []
    for (let w = 0; w < 8; w++) {
      const reg = await req(b.url, 'POST', '/workers/register', {
        token: key,
        body: registerBody({ name: `w${w}`, models: ['storm:rt'], max_concurrent_jobs: 4 }),
      })
      workers.push(reg.body.worker_id)
    }
    // Each poller works through one instance until it dies, then through the survivor; an upload
    // cut off by the kill is sent again there (uploads are idempotent).
    let alive = [a.url, b.url]
    let completed = 0
    let killed = false
    const call = async (preferred: string, path: string, opts: Parameters<typeof buildRequest>[3]) => {
      for (;;) {
        const url = alive.includes(preferred) ? preferred : alive[0]!
        try {
          return await req(url, 'POST', path, opts)
        } catch {
          alive = alive.filter((u) => u !== url)
        }
      }
    }
    const uploadResult = (via: string, jobId: string, workerId: string, assignmentId?: string) => {
      const form = new FormData()
      form.append('job_id', jobId)
      form.append('worker_id', workerId)
      if (assignmentId) form.append('assignment_id', assignmentId)
      form.append('file', new Blob([okLine('only')], { type: 'application/jsonl' }), 'out.jsonl')
      return call(via, '/workers/upload-results', { token: key, raw: form })
    }
    await Promise.all(
      Array.from({ length: 16 }, async (_, p) => {
        const via = p % 2 ? a.url : b.url
        const worker = workers[p % 8]!
        for (;;) {
          const polled = await call(via, '/workers/poll', { token: key, body: { worker_id: worker } })
          const job = polled.body.job
          if (!job) return
          const done = await uploadResult(via, job.job_id, worker, job.assignment_id)
          expect([200, 403]).toContain(done.status)
          if (++completed === BATCHES / 3 && !killed) {
            killed = true
            a.proc.kill(9) // mid-storm: other pollers are claiming and uploading through it now
          }
        }
      }),
    )
    expect(killed).toBe(true)
    expect(await a.exited).not.toBe(0)

    // A claim the kill cut off after its commit is still held by a live worker: the worker learns
    // it from its heartbeat (assigned_job_ids, docs/api.md §7) and delivers.
    for (const worker of workers) {
      const beat = await req(b.url, 'POST', `/workers/${worker}/heartbeat`, {
        token: key,
        body: heartbeatBody(),
      })
      for (const jobId of beat.body.assigned_job_ids)
        expect((await uploadResult(b.url, jobId, worker)).status).toBe(200)
    }

    const db = new SQL({ url: databaseUrl, max: 1 })
    try {
      const byStatus = await db`SELECT status, count(*)::int AS n FROM batches GROUP BY status`
      expect(byStatus).toEqual([{ status: 'completed', n: BATCHES }])
      const [held] =
        await db`SELECT count(*)::int AS n, count(DISTINCT batch_id)::int AS batches FROM batch_assignments`
      expect(held).toEqual({ n: BATCHES, batches: BATCHES })
      const outputs = await db`SELECT b.id, f.bytes FROM batches b JOIN files f ON f.id = b.output_file_id`
      expect(outputs.length).toBe(BATCHES)
      expect(new Set(outputs.map((o: { id: string }) => o.id))).toEqual(ids)
    } finally {
      await db.close()
    }
    // Every output file's bytes are there and whole.
    const list = await req(b.url, 'GET', '/v1/batches?limit=100', { token })
    for (const batch of list.body.data) {
      const content = await req(b.url, 'GET', `/v1/files/${batch.output_file_id}/content`, { token })
      expect(JSON.parse(content.text).custom_id).toBe('only')
    }
  },
  180_000,
)
