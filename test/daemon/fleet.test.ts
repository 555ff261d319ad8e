import { afterEach, expect, test } from 'bun:test'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runOnce as sweep } from '../../src/services/sweeper'
import { startTestServer, type TestServer } from '../helpers/app'
import { daemonOptions, fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { type FakeRuntime, startFakeRuntime } from '../helpers/fake-runtime'
import { captureLogLine } from '../helpers/secrets'
import { until } from '../helpers/until'
import { makeCatalogEntry, makeFleet, makeValidatedBatch } from '../helpers/workers'

// docs/api.md §16 over HTTP with real reference daemons, each with its own stand-in engine: one batch
// drained by the whole fleet gives the files an unsplit run gives; a holder killed mid-shard costs
// that shard, not the batch.

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
  // Every request ran exactly once.
  expect(seen.size).toBe(400)
  expect([...seen.values()].every((n) => n === 1)).toBe(true)
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

test('a holder SIGKILLed mid-shard: only its shards run again, and the batch completes', async () => {
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
  const proc = Bun.spawn(
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
  )
  cleanups.push(() => proc.kill('SIGKILL'))
  const token = f.user.token
  const held = async () =>
    (
      (await server.req('GET', `/v1/batches/${batch.id}/shards?limit=100`, { token })).body.data as {
        id: string
        status: string
        worker_name: string | null
        first_request: number
        requests: number
      }[]
    ).filter((s) => s.status === 'running' && s.worker_name === 'doomed')
  await until('the doomed daemon mid-shard', async () => (await held()).length > 0 && slow.requests > 5)
  const helpers = [0, 1].map((i) => daemon(server, f.key, engine(seen), `gpu-${i}`))
  await until('the others at work', async () => seen.size > 60)
  proc.kill('SIGKILL')
  await proc.exited
  for (const l of (await new Response(proc.stdout).text()).split('\n').filter(Boolean)) captureLogLine(l)
  const lost = await held()
  expect(lost.length).toBeGreaterThan(0)
  const lostIds = new Set(
    lost.flatMap((s) => Array.from({ length: s.requests }, (_, i) => `req-${s.first_request + i}`)),
  )

  // Past the timeout on the server's clock; the live daemons beat again, then one sweeper pass.
  server.clock.advance(5)
  await Promise.all(helpers.map((h) => h.next('heartbeat', (e) => e.ok)))
  const pass = await sweep(server.deps)
  expect(pass.requeued).toContain(batch.id)

  await until('completion', async () => {
    const b = (await server.req('GET', `/v1/batches/${batch.id}`, { token })).body
    return b.status === 'completed'
  })
  const done = await resultsOf(server, token, batch.id)
  expect(done.batch.request_counts).toEqual({ total: 300, completed: 300, failed: 0 })
  expect(done.output).toHaveLength(300)
  // What ran twice lies within the killed holder's shards; nothing else ran again.
  const twice = [...seen].filter(([, n]) => n > 1).map(([id]) => id)
  expect(twice.length).toBeGreaterThan(0)
  for (const id of twice) expect(lostIds.has(id)).toBe(true)
  expect(seen.size).toBe(300)
  const shards = (await server.req('GET', `/v1/batches/${batch.id}/shards?limit=100`, { token })).body.data
  expect(
    shards
      .filter((s: { attempts: number }) => s.attempts > 0)
      .map((s: { id: string }) => s.id)
      .sort(),
  ).toEqual(lost.map((s) => s.id).sort())
}, 60_000)
