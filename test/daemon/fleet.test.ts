import { afterEach, expect, test } from 'bun:test'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startTestServer, type TestServer } from '../helpers/app'
import { ownProcess } from '../helpers/children'
import { daemonOptions, fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { type FakeRuntime, startFakeRuntime } from '../helpers/fake-runtime'
import { captureLogLine } from '../helpers/secrets'
import { until } from '../helpers/until'
import { makeCatalogEntry, makeFleet, makeValidatedBatch } from '../helpers/workers'

// docs/api.md §16 over HTTP with real reference daemons, each with its own stand-in engine: one batch
// drained by the whole fleet gives the files an unsplit run gives; a holder stalled mid-shard holds
// nothing hostage: backup copies on the idle daemons complete its shards.

const MODEL = 'fleet/model'
const CLI = join(import.meta.dir, '../../src/daemon/cli.ts')
const BOUNDS = { SHARD_MIN_REQUESTS: '10', SHARD_MAX_REQUESTS: '60', HEARTBEAT_TIMEOUT_SECONDS: '4' }

let cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
})

/** A stand-in engine that counts, by custom_id (the content names it), every request it serves. */
function engine(seen: Map<string, number>, o: Parameters<typeof startFakeRuntime>[0] = {}): FakeRuntime {
  const rt = startFakeRuntime({
    models: [MODEL],
    slots: 4,
    latencyMs: 2,
    behaviour: ({ raw }) => {
      const id = /hello (req-[0-9]+)/.exec(raw)?.[1]
      if (id) seen.set(id, (seen.get(id) ?? 0) + 1)
      return undefined
    },
    ...o,
  })
  cleanups.push(() => rt.stop())
  return rt
}

async function serverWith(env: Record<string, string>) {
  const server = await startTestServer(env)
  cleanups.push(() => server.stop())
  server.deps.startedAt = 0 // past the startup grace: the test sweeps when it means to
  const f = await makeFleet(server)
  const entry = await makeCatalogEntry(server.deps, { runtime: 'openai', runtime_model_id: MODEL })
  return { server, f, entry }
}

function daemon(server: TestServer, key: string, rt: FakeRuntime, name: string): RunningAgent {
  const running = runAgent(daemonOptions(server.url, key, rt.url, { name, concurrency: 4 }), fastDeps())
  cleanups.push(async () => {
    running.agent.shutdown(true)
    await running.done
  })
  return running
}

const ids = (n: number) =>
  // Every 17th request is one the engine refuses (#400): the error file has lines of both kinds.
  Array.from({ length: n }, (_, i) => (i % 17 === 5 ? `req-${i}#400` : `req-${i}`))

/** A finished batch's lines, each reduced to what does not vary between runs. */
async function resultsOf(server: TestServer, token: string, batchId: string) {
  const batch = (await server.req('GET', `/v1/batches/${batchId}`, { token })).body
  const read = async (fileId: string | null) =>
    fileId
      ? ((await server.req('GET', `/v1/files/${fileId}/content`, { token })).text as string)
          .split('\n')
          .filter(Boolean)
          .map((l) => {
            const line = JSON.parse(l)
            return JSON.stringify([
              line.custom_id,
              line.response?.status_code ?? null,
              line.response?.body?.choices?.[0]?.message?.content ?? null,
              line.error?.code ?? null,
            ])
          })
          .sort()
      : []
  return { batch, output: await read(batch.output_file_id), errors: await read(batch.error_file_id) }
}

test('four daemons drain one batch, every one taking shards; the files are those of an unsplit run', async () => {
  const split = await serverWith(BOUNDS)
  const batch = await makeValidatedBatch(split.server.deps, {
    userId: split.f.user.id,
    model: split.entry.id,
    customIds: ids(400),
    indexed: true,
  })
  const seen = new Map<string, number>()
  for (const i of [0, 1, 2, 3]) daemon(split.server, split.f.key, engine(seen), `gpu-${i}`)
  const token = split.f.user.token
  await until('completion', async () => {
    const b = (await split.server.req('GET', `/v1/batches/${batch.id}`, { token })).body
    return b.status === 'completed'
  })
  const shards = (await split.server.req('GET', `/v1/batches/${batch.id}/shards?limit=100`, { token })).body
    .data
  expect(new Set(shards.map((s: { worker_name: string }) => s.worker_name))).toEqual(
    new Set(['gpu-0', 'gpu-1', 'gpu-2', 'gpu-3']),
  )
  expect(
    shards.every((s: { status: string; attempts: number }) => s.status === 'done' && s.attempts === 0),
  ).toBe(true)
  // Every request ran; one that ran twice lies in a shard with a backup copy (docs/api.md §16: the
  // daemons that ran out of work backed up the last shards).
  expect(seen.size).toBe(400)
  const backedUp = new Set(
    shards
      .filter((s: { backup_worker_id: string | null }) => s.backup_worker_id !== null)
      .flatMap((s: { first_request: number; requests: number }) =>
        Array.from({ length: s.requests }, (_, i) => s.first_request + i),
      ),
  )
  for (const [id, runs] of seen) if (runs > 1) expect(backedUp.has(Number(/\d+/.exec(id)![0]))).toBe(true)
  const got = await resultsOf(split.server, token, batch.id)

  // The same input, run whole by one daemon on a server that never splits.
  const whole = await serverWith({ SHARD_MAX_REQUESTS: '0' })
  const again = await makeValidatedBatch(whole.server.deps, {
    userId: whole.f.user.id,
    model: whole.entry.id,
    customIds: ids(400),
  })
  daemon(whole.server, whole.f.key, engine(new Map()), 'solo')
  await until('the unsplit run', async () => {
    const b = (await whole.server.req('GET', `/v1/batches/${again.id}`, { token: whole.f.user.token })).body
    return b.status === 'completed'
  })
  const want = await resultsOf(whole.server, whole.f.user.token, again.id)
  expect(want.batch.shards).toBeNull()
  expect(got.batch.request_counts).toEqual(want.batch.request_counts)
  expect(got.batch.request_counts.failed).toBe(24)
  expect(got.output).toEqual(want.output)
  expect(got.errors).toEqual(want.errors)
}, 60_000)

test('a holder stalled mid-shard: backup copies on the idle daemons complete the batch while it is still online; resumed, it drops its jobs quietly', async () => {
  const { server, f, entry } = await serverWith(BOUNDS)
  const batch = await makeValidatedBatch(server.deps, {
    userId: f.user.id,
    model: entry.id,
    customIds: Array.from({ length: 300 }, (_, i) => `req-${i}`),
    indexed: true,
  })
  const seen = new Map<string, number>()
  // The doomed daemon is a real process with a slow engine; it claims first.
  const slow = engine(seen, { latencyMs: 40, slots: 2 })
  const dir = mkdtempSync(join(tmpdir(), 'gk-fleet-'))
  const proc = ownProcess(
    Bun.spawn(
      [
        'bun',
        CLI,
        '--server',
        server.url,
        '--runtime',
        'openai',
        '--runtime-url',
        slow.url,
        '--name',
        'doomed',
        '--vram-gb',
        '24',
        '--progress-interval',
        '0.1',
      ],
      {
        env: {
          ...process.env,
          GRIDKEEP_WORKER_KEY: f.key,
          GRIDKEEP_STATE_DIR: dir,
          GRIDKEEP_POLL_INTERVAL: '0.05',
        },
        stdout: 'pipe',
        stderr: 'pipe',
      },
    ),
  )
  cleanups.push(() => proc.kill('SIGKILL'))
  // Its log, line by line, as it comes.
  const logged: { level: string; msg: string; job_id?: string }[] = []
  void (async () => {
    let rest = ''
    for await (const chunk of proc.stdout) {
      const text = rest + new TextDecoder().decode(chunk)
      const lines = text.split('\n')
      rest = lines.pop()!
      for (const l of lines.filter(Boolean)) {
        captureLogLine(l)
        logged.push(JSON.parse(l))
      }
    }
  })()
  const token = f.user.token
  type Shard = {
    id: string
    status: string
    attempts: number
    worker_name: string | null
    backup_worker_name: string | null
    backup_won: boolean
    first_request: number
    requests: number
  }
  const shardsNow = async () =>
    (await server.req('GET', `/v1/batches/${batch.id}/shards?limit=100`, { token })).body.data as Shard[]
  const held = async () =>
    (await shardsNow()).filter((s) => s.status === 'running' && s.worker_name === 'doomed')
  await until('the doomed daemon mid-shard', async () => (await held()).length > 0 && slow.requests > 5)
  const helpers = [0, 1].map((i) => daemon(server, f.key, engine(seen), `gpu-${i}`))
  await until('the others at work', async () => seen.size > 60)
  // Stalled: alive, connected, online to the server, and silent.
  proc.kill('SIGSTOP')
  const stalled = (await held()).map((s) => s.id)
  expect(stalled.length).toBeGreaterThan(0)

  await until('completion', async () => {
    const b = (await server.req('GET', `/v1/batches/${batch.id}`, { token })).body
    return b.status === 'completed'
  })
  // Completed while the stalled worker is still online by the server's own reckoning: no timeout
  // passed, no sweep requeued anything; its shards are done by their backup copies.
  const workers = (await server.req('GET', `/v1/orgs/${f.orgId}/workers`, { token })).body.data
  expect(workers.find((w: { name: string }) => w.name === 'doomed').status).toBe('online')
  const shards = await shardsNow()
  for (const id of stalled) {
    expect(shards.find((s) => s.id === id)).toMatchObject({
      status: 'done',
      attempts: 0,
      backup_worker_name: 'doomed',
      backup_won: true,
    })
  }
  expect(shards.every((s) => s.status === 'done' && s.attempts === 0)).toBe(true)
  const metrics = (await server.req('GET', '/metrics')).text ?? ''
  expect(metrics).not.toContain('gridkeep_batch_requeues_total{')
  expect(metrics).toMatch(/gridkeep_shard_backups_total\{outcome="won"\} [1-9]/)
  const done = await resultsOf(server, token, batch.id)
  expect(done.batch.request_counts).toEqual({ total: 300, completed: 300, failed: 0 })
  expect(done.output).toHaveLength(300)
  expect(seen.size).toBe(300)
  // What ran twice lies within shards that had a backup copy.
  const backedUp = new Set(
    shards
      .filter((s) => s.backup_worker_name !== null)
      .flatMap((s) => Array.from({ length: s.requests }, (_, i) => `req-${s.first_request + i}`)),
  )
  for (const [id, runs] of seen) if (runs > 1) expect(backedUp.has(id)).toBe(true)

  // Resumed, the stalled daemon hears that its jobs are moot and drops each without a word of failure.
  proc.kill('SIGCONT')
  await until('the stalled jobs dropped', () =>
    stalled.every((id) => logged.some((l) => l.job_id === id && l.msg.startsWith('job dropped'))),
  )
  expect(logged.filter((l) => /failure reported|job failed/.test(l.msg))).toEqual([])
  for (const h of helpers)
    expect(h.events.filter((e) => e.type === 'job_ended' && e.outcome === 'failed')).toEqual([])
}, 60_000)
