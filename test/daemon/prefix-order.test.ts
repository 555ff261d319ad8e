import { afterEach, expect, test } from 'bun:test'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runOnce as sweep } from '../../src/services/sweeper'
import { startTestServer } from '../helpers/app'
import { jsonl, makeBatch } from '../helpers/batches'
import { ownProcess } from '../helpers/children'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { until } from '../helpers/until'
import { heartbeat, makeCatalogEntry, makeFleet, poll, registerWorker } from '../helpers/workers'

// docs/api.md §16 with an execution order (§6): a reference daemon SIGKILLed while it holds a shard of
// a prefix group. The sweeper requeues that shard whole, and the worker that reruns it gets the same
// run of the order — the same group's lines — not a new cut.

const MODEL = 'prefix/model'
const CLI = join(import.meta.dir, '../../src/daemon/cli.ts')

let cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
})

const doc = (d: number) => `Document ${d}. ${`Line ${d} of it, and more of it. `.repeat(40)}`

/** 6 documents × 10 questions of `model`, question-major (custom_id `d<doc>-q<question>`). */
const questionMajor = (model: string) =>
  Array.from({ length: 10 }, (_, q) =>
    Array.from({ length: 6 }, (_, d) =>
      JSON.stringify({
        custom_id: `d${d}-q${q}`,
        body: { model, messages: [{ role: 'user', content: `${doc(d)}\nQuestion ${q}?` }] },
      }),
    ),
  ).flat()

test('a SIGKILLed daemon holding a shard of a prefix group: the rerun gets that group', async () => {
  const server = await startTestServer({
    SHARD_MIN_REQUESTS: '10',
    SHARD_MAX_REQUESTS: '30',
    HEARTBEAT_TIMEOUT_SECONDS: '4',
  })
  cleanups.push(() => server.stop())
  server.deps.startedAt = 0 // past the startup grace: the test sweeps when it means to
  const f = await makeFleet(server)
  const entry = await makeCatalogEntry(server.deps, { runtime: 'openai', runtime_model_id: MODEL })
  // 6 documents × 10 questions, question-major: in execution order each document's 10 lines are
  // one run, and a shard of 30 holds three whole groups.
  const batch = await makeBatch(server, f.user, jsonl(questionMajor(entry.id)))
  const token = f.user.token
  await until(
    'validated',
    async () => (await server.req('GET', `/v1/batches/${batch.id}`, { token })).body.status === 'validated',
  )

  // The doomed daemon: a real process, on an engine slow enough that it is killed mid-shard.
  const rt = startFakeRuntime({ models: [MODEL], slots: 1, latencyMs: 200 })
  cleanups.push(() => rt.stop())
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
        rt.url,
        '--name',
        'doomed',
        '--vram-gb',
        '24',
      ],
      {
        env: {
          ...process.env,
          GRIDKEEP_WORKER_KEY: f.key,
          GRIDKEEP_STATE_DIR: mkdtempSync(join(tmpdir(), 'gk-prefix-')),
          GRIDKEEP_POLL_INTERVAL: '0.05',
          GRIDKEEP_CONCURRENCY: '1',
        },
        stdout: 'ignore',
        stderr: 'ignore',
      },
    ),
  )
  cleanups.push(() => proc.kill('SIGKILL'))
  type Shard = {
    id: string
    status: string
    worker_name: string | null
    first_request: number
    requests: number
  }
  const shards = async () =>
    (await server.req('GET', `/v1/batches/${batch.id}/shards`, { token })).body.data as Shard[]
  await until(
    'the doomed daemon mid-shard',
    async () => (await shards()).some((s) => s.status === 'running') && rt.requests > 0,
  )
  const [held] = (await shards()).filter((s) => s.worker_name === 'doomed' && s.status === 'running')
  expect(held).toMatchObject({ first_request: 0, requests: 30 })
  proc.kill('SIGKILL')
  await proc.exited

  // Silent past the timeout: the sweeper requeues its shard, whole.
  server.clock.advance(5)
  const swept = await sweep(server.deps)
  expect(swept.requeued).toContain(batch.id)
  expect((await shards()).find((s) => s.id === held!.id)).toMatchObject({
    status: 'waiting',
    worker_name: null,
  })

  // The rerun: another worker's poll gets that shard before any new cut, with the same lines.
  const wid = await registerWorker(server, f.key, {
    name: 'rerun',
    models: [MODEL],
    capabilities: { shards: true },
  })
  expect((await heartbeat(server, f.key, wid)).status).toBe(200)
  const job = (await poll(server, f.key, wid))!
  expect(job.job_id).toBe(held!.id)
  expect(job.shard).toMatchObject({ first_request: 0, requests: 30 })
  const ids = ((await server.req('GET', job.input_path, { token: f.key })).text ?? '')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l).custom_id as string)
  // Documents 0, 1 and 2, each group whole and together.
  expect(ids).toEqual([0, 1, 2].flatMap((d) => Array.from({ length: 10 }, (_, q) => `d${d}-q${q}`)))
}, 60_000)

test('--engine llama.cpp: the engine receives each shard’s requests in execution order, each with cache_prompt: true (docs/worker.md)', async () => {
  const server = await startTestServer({ SHARD_MIN_REQUESTS: '10', SHARD_MAX_REQUESTS: '30' })
  cleanups.push(() => server.stop())
  const f = await makeFleet(server)
  const entry = await makeCatalogEntry(server.deps, { runtime: 'openai', runtime_model_id: MODEL })
  // 6 documents × 10 questions, question-major: two shards of 30, documents 0–2 and 3–5.
  const batch = await makeBatch(server, f.user, jsonl(questionMajor(entry.id)))
  const token = f.user.token
  // The request bodies as the engine received them, in order of arrival.
  const received: { id: string; cache_prompt: unknown }[] = []
  const rt = startFakeRuntime({
    models: [MODEL],
    llama: true,
    slots: 1,
    onRequest: (body) => {
      const content: string = body.messages[0].content
      const [, d] = /^Document (\d+)\./.exec(content)!
      const [, q] = /Question (\d+)\?$/.exec(content)!
      received.push({ id: `d${d}-q${q}`, cache_prompt: body.cache_prompt })
    },
  })
  cleanups.push(() => rt.stop())
  const proc = ownProcess(
    Bun.spawn(
      [
        'bun',
        CLI,
        '--server',
        server.url,
        '--runtime',
        'openai',
        '--engine',
        'llama.cpp',
        '--runtime-url',
        rt.url,
      ],
      {
        env: {
          ...process.env,
          GRIDKEEP_WORKER_KEY: f.key,
          GRIDKEEP_STATE_DIR: mkdtempSync(join(tmpdir(), 'gk-prefix-')),
          GRIDKEEP_POLL_INTERVAL: '0.05',
          GRIDKEEP_CONCURRENCY: '1',
          GRIDKEEP_WORKER_NAME: 'llama',
          GRIDKEEP_VRAM_GB: '24',
        },
        stdout: 'ignore',
        stderr: 'ignore',
      },
    ),
  )
  cleanups.push(() => proc.kill('SIGKILL'))
  await until(
    'completed',
    async () => (await server.req('GET', `/v1/batches/${batch.id}`, { token })).body.status === 'completed',
  )
  const shards = (await server.req('GET', `/v1/batches/${batch.id}/shards`, { token })).body.data
  expect(
    shards.map((s: { first_request: number; requests: number }) => [s.first_request, s.requests]),
  ).toEqual([
    [0, 30],
    [30, 30],
  ])
  expect(received.map((r) => r.cache_prompt)).toEqual(Array(60).fill(true))
  // Each shard's requests (its worker may run both at once, interleaved) in its run of the
  // execution order: its documents' groups whole, each in question order — not the file's order.
  const group = (docs: number[]) => docs.flatMap((d) => Array.from({ length: 10 }, (_, q) => `d${d}-q${q}`))
  const ofDocs = (docs: number[]) => received.map((r) => r.id).filter((id) => docs.includes(Number(id[1])))
  expect(ofDocs([0, 1, 2])).toEqual(group([0, 1, 2]))
  expect(ofDocs([3, 4, 5])).toEqual(group([3, 4, 5]))
}, 60_000)
