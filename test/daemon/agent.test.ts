import { afterEach, describe, expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { Agent, serially } from '../../src/daemon/agent'
import { DEFAULT_MAX_RETRY_AFTER_MS, manualTimers, retryDelay } from '../../src/daemon/backoff'
import { DAEMON_VERSION } from '../../src/daemon/client'
import { parseNvidiaSmi } from '../../src/daemon/gpu'
import { AGENT_MOVES, type AgentState, checkMove, IllegalAgentMove } from '../../src/daemon/lifecycle'
import type { Runtime } from '../../src/daemon/runtimes/types'
import { randomBase62 } from '../../src/lib/ids'
import { chatLines, daemonOptions, fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { type FakeControlPlane, startFakeControlPlane } from '../helpers/fake-control-plane'
import { type FakeRuntime, startFakeRuntime } from '../helpers/fake-runtime'
import { capturedLogLines, rememberSecret } from '../helpers/secrets'
import { until } from '../helpers/until'

// The agent against a scripted control plane (test/helpers/fake-control-plane.ts) and a stand-in
// runtime. Behaviour against the real server: test/daemon/e2e.test.ts.

const MODEL = 'Qwen/Qwen2.5-0.5B-Instruct'
let cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
})

function setup(rtOpts: Parameters<typeof startFakeRuntime>[0] = {}) {
  const key = `gk-${randomBase62(40)}`
  rememberSecret(key)
  const cp = startFakeControlPlane({ key })
  const rt = startFakeRuntime({ models: [MODEL], ...rtOpts })
  cleanups.push(
    () => cp.stop(),
    () => rt.stop(),
  )
  return { cp, rt, key }
}

function start(
  cp: FakeControlPlane,
  rt: FakeRuntime,
  o: Parameters<typeof daemonOptions>[3] = {},
  deps = fastDeps(),
) {
  const running = runAgent(daemonOptions(cp.url, cp.key, rt.url, o), deps)
  cleanups.push(async () => {
    running.agent.shutdown(true)
    await running.done
  })
  return running
}

async function stopAgent(r: RunningAgent) {
  r.agent.shutdown(true)
  return r.done
}

describe('registration', () => {
  test('registers with identity, runtime, inventory, GPUs and capacity; persists worker_id and machine_id', async () => {
    const { cp, rt } = setup()
    const csv = readFileSync(join(import.meta.dir, '../fixtures/nvidia-smi/two-rtx4090.csv'), 'utf8')
    const gpu = { sample: async () => parseNvidiaSmi(csv, '12.4') }
    const opts = daemonOptions(cp.url, cp.key, rt.url, {
      max_jobs: 2,
      max_download_gb: 40,
      name: 'gpu-box-1',
      capabilities: ['json_mode', 'logprobs'],
    })
    const first = runAgent(opts, fastDeps({ gpu }))
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    const reg = cp.registrations[0]
    expect(reg).toMatchObject({
      name: 'gpu-box-1',
      hostname: hostname(),
      daemon_version: DAEMON_VERSION,
      max_concurrent_jobs: 2,
      // An OpenAI-compatible server the daemon does not manage cannot download: never asked to.
      max_download_gb: 0,
      models: [MODEL],
      runtimes: [{ engine: 'openai', base_url: rt.url, status: 'online', inventory: [] }],
    })
    // docs/api.md §7: the engine's capabilities, every one stated (true or false).
    expect(reg.runtimes[0].capabilities).toEqual({
      json_mode: true,
      vision: false,
      embeddings: false,
      logprobs: true,
    })
    expect(reg.machine_id).toMatch(/^[0-9a-f]{32}$/)
    expect(reg.worker_id).toBeUndefined()
    expect(reg.gpus).toHaveLength(2)
    // With its nvidia-smi index (docs/api.md §7).
    expect(reg.gpus[0]).toEqual({
      index: 0,
      vendor: 'nvidia',
      name: 'NVIDIA GeForce RTX 4090',
      vram_gb: 24,
      driver: '550.54.14',
      cuda: '12.4',
    })
    const workerId = first.agent.id
    expect(await stopAgent(first)).toBe(0)

    // A restart reuses the persisted identity.
    const second = runAgent(opts, fastDeps({ gpu }))
    cleanups.push(() => stopAgent(second))
    await cp.waitFor(() => cp.registrations.length === 2, 'the second registration')
    expect(cp.registrations[1]).toMatchObject({ machine_id: reg.machine_id, worker_id: workerId })
  })

  test('a rejected key stops the daemon with exit code 1 and the key never reaches the logs', async () => {
    const { cp, rt } = setup()
    const wrong = `gk-${randomBase62(40)}`
    rememberSecret(wrong)
    const r = runAgent(daemonOptions(cp.url, wrong, rt.url))
    expect(await r.done).toBe(1)
    expect(capturedLogLines().some((l) => l.includes('rejected the worker key'))).toBe(true)
    expect(capturedLogLines().some((l) => l.includes(wrong) || l.includes(cp.key))).toBe(false)
  })

  test('registration waits out an unreachable control plane', async () => {
    const { cp, rt } = setup()
    cp.failNext('/workers/register', 503, 3)
    const r = start(cp, rt)
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat after registering')
    expect(cp.registrations).toHaveLength(1)
    expect(r.agent.id).toBeTruthy()
  })
})

describe('heartbeat', () => {
  test('carries activity, VRAM, loaded models, inventory and uptime; GPU figures when probed', async () => {
    const { cp, rt } = setup()
    const csv = readFileSync(join(import.meta.dir, '../fixtures/nvidia-smi/two-rtx4090.csv'), 'utf8')
    start(
      cp,
      rt,
      { vram_gb: undefined },
      fastDeps({ gpu: { sample: async () => parseNvidiaSmi(csv, '12.4') } }),
    )
    await cp.waitFor(() => cp.heartbeats.length > 1, 'two heartbeats')
    const hb = cp.heartbeats[1]
    expect(hb).toMatchObject({
      activity: 'idle',
      gpu_utilization: 48.5,
      gpu_memory_used_gb: 17.8,
      vram_total_gb: 48,
      vram_available_gb: 30.2,
      loaded_models: [MODEL],
      inventory: [],
    })
    expect(hb.current_job_id).toBeUndefined()
    expect(Number.isInteger(hb.uptime_seconds)).toBe(true)
  })

  test('without a GPU, VRAM comes from --vram-gb and no utilisation is claimed', async () => {
    const { cp, rt } = setup()
    start(cp, rt, { vram_gb: 12 })
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    expect(cp.heartbeats[0]).toMatchObject({ vram_total_gb: 12, vram_available_gb: 12 })
    expect(cp.heartbeats[0].gpu_utilization).toBeUndefined()
  })

  test('keeps its own cadence while a long job runs, reporting busy, the job and its progress', async () => {
    const { cp, rt } = setup({ latencyMs: 40 })
    const job = cp.addJob({ job_id: 'batch_long', input: chatLines(30).join('\n'), model: MODEL })
    start(cp, rt, { concurrency: 1 })
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload', 15_000)
    const during = cp.heartbeats.filter((h) => h.current_job_id === job.job_id)
    expect(during.length).toBeGreaterThanOrEqual(5)
    for (const h of during) expect(h.activity).toBe('busy')
    const progressed = during.map((h) => h.progress.completed_prompts)
    expect(progressed.at(-1)).toBeGreaterThan(progressed[0])
    expect(during[0].progress.total_prompts).toBe(30)
    await cp.waitFor(() => cp.heartbeats.at(-1).activity === 'idle', 'idle again')
  })

  test('a 404 (the server forgot us) makes the daemon register again and carry on', async () => {
    const { cp, rt } = setup()
    const r = start(cp, rt)
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    const firstId = r.agent.id
    cp.forgetWorkers()
    await cp.waitFor(() => cp.registrations.length >= 2, 're-registration')
    const n = cp.heartbeats.length
    await cp.waitFor(() => cp.heartbeats.length > n + 1, 'heartbeats after re-registering')
    expect(r.agent.id).not.toBe(firstId)
    expect(cp.heartbeats.at(-1).worker_id).toBe(r.agent.id)
  })

  test('rides out a control-plane restart', async () => {
    const { cp, rt } = setup()
    const r = start(cp, rt)
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    const failed = r.next('heartbeat', (e) => !e.ok)
    await cp.stop()
    // A heartbeat met the stopped server.
    await failed
    cp.restart()
    const n = cp.heartbeats.length
    await cp.waitFor(() => cp.heartbeats.length > n + 1, 'heartbeats after the restart')
    expect(cp.registrations).toHaveLength(1)
    expect(cp.heartbeats.at(-1).worker_id).toBe(r.agent.id)
  })
})

describe('jobs', () => {
  test('download with the worker key, run every line, upload with assignment_id and real counts', async () => {
    const { cp, rt } = setup({ latencyMs: 10 })
    const lines = chatLines(25, 'catalogue-slug', (i) => (i % 5 === 0 ? `#400 bad ${i}` : `ok ${i}`))
    const job = cp.addJob({ job_id: 'batch_one', input: lines.join('\n'), model: MODEL })
    start(cp, rt, { progress_interval: 0.01, concurrency: 2 }, fastDeps())
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload')
    expect(cp.downloads[0]).toEqual({
      path: '/v1/files/file-batch_one/content',
      authorization: `Bearer ${cp.key}`,
    })
    const up = cp.uploads[0]!
    expect(up).toMatchObject({
      job_id: 'batch_one',
      assignment_id: job.assignment_id,
      completed: 20,
      failed: 5,
    })
    expect(up.lines.map((l) => l.custom_id).sort()).toEqual(
      Array.from({ length: 25 }, (_, i) => `req-${i}`).sort(),
    )
    const good = up.lines.find((l) => l.custom_id === 'req-1')
    expect(good.response.body.model).toBe(MODEL)
    expect(up.lines.find((l) => l.custom_id === 'req-5').response.status_code).toBe(400)
    expect([...rt.models]).toEqual([MODEL])
    // Progress went out with the fence, never went down, and never claimed more than done.
    expect(cp.progress.length).toBeGreaterThan(0)
    for (const p of cp.progress)
      expect(p).toMatchObject({ job_id: 'batch_one', assignment_id: job.assignment_id, total_prompts: 25 })
    const done = cp.progress.map((p) => p.completed_prompts + p.failed_prompts)
    for (let i = 1; i < done.length; i++) expect(done[i]).toBeGreaterThanOrEqual(done[i - 1])
    expect(cp.failures).toEqual([])
  })

  test('an input download that breaks off is retried', async () => {
    const { cp, rt } = setup()
    cp.breakNextDownload = true
    cp.addJob({ job_id: 'batch_broken_download', input: chatLines(200).join('\n'), model: MODEL })
    start(cp, rt)
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload')
    expect(cp.downloads).toHaveLength(2)
    const ids = cp.uploads[0]!.lines.map((l) => l.custom_id)
    expect(ids).toHaveLength(200)
    expect(new Set(ids).size).toBe(200)
    expect(cp.failures).toEqual([])
  })

  test('polls only while it has free capacity', async () => {
    const { cp, rt } = setup({ latencyMs: 60 })
    cp.addJob({ job_id: 'batch_a', input: chatLines(12).join('\n'), model: MODEL })
    cp.addJob({ job_id: 'batch_b', input: chatLines(12).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 1, max_jobs: 1 })
    await cp.waitFor(() => cp.heartbeats.some((h) => h.current_job_id === 'batch_a'), 'job a running')
    const polls = cp.polls
    // The poll loop goes round while batch_a holds the only slot, and sends no poll.
    await r.next('poll_skipped', (e) => e.reason === 'at capacity')
    await r.next('poll_skipped', (e) => e.reason === 'at capacity')
    expect(cp.polls).toBe(polls)
    expect(cp.uploads).toEqual([])
    await cp.waitFor(() => cp.uploads.length === 2, 'job b uploaded')
    expect(cp.uploads.map((u) => u.job_id)).toEqual(['batch_a', 'batch_b'])
  })

  test('every job held at once shares one limit of requests in flight (--concurrency)', async () => {
    const { cp, rt } = setup({ latencyMs: 20 })
    for (const id of ['batch_x', 'batch_y', 'batch_z'])
      cp.addJob({ job_id: id, input: chatLines(10).join('\n'), model: MODEL })
    start(cp, rt, { concurrency: 2, max_jobs: 3 })
    await cp.waitFor(() => cp.uploads.length === 3, 'three uploads')
    expect(cp.uploads.map((u) => u.completed)).toEqual([10, 10, 10])
    // The bound is used, and never exceeded across the jobs.
    expect(rt.maxInFlight).toBe(2)
  })

  test('--engine llama.cpp: each request carries cache_prompt: true unless its line sets it; embeddings and other engines do not (docs/worker.md)', async () => {
    const bodies: any[] = []
    const { cp, rt } = setup({ llama: true, onRequest: (b) => bodies.push(b) })
    const chat = (id: string, extra: object = {}) =>
      JSON.stringify({
        custom_id: id,
        body: { model: 'catalogue-slug', messages: [{ role: 'user', content: id }], ...extra },
      })
    cp.addJob({
      job_id: 'batch_chat',
      input: [chat('a'), chat('b', { cache_prompt: false }), chat('c')].join('\n'),
      model: MODEL,
    })
    cp.addJob({
      job_id: 'batch_embed',
      input: JSON.stringify({ custom_id: 'e', body: { model: 'catalogue-slug', input: 'embed me' } }),
      model: MODEL,
      endpoint: '/v1/embeddings',
    })
    const r = start(cp, rt, { engine: 'llama.cpp' })
    await cp.waitFor(() => cp.uploads.length === 2, 'both uploads')
    const byId = new Map(bodies.map((b) => [b.messages?.[0].content ?? 'e', b]))
    expect(byId.get('a')).toMatchObject({ cache_prompt: true })
    expect(byId.get('b')).toMatchObject({ cache_prompt: false })
    expect(byId.get('c')).toMatchObject({ cache_prompt: true })
    expect(byId.get('e')).toEqual({ model: MODEL, input: 'embed me' })
    await stopAgent(r)

    // The same lines on another engine go as written.
    bodies.length = 0
    cp.addJob({ job_id: 'batch_vllm', input: [chat('a'), chat('c')].join('\n'), model: MODEL })
    start(cp, rt, { engine: 'vllm' })
    await cp.waitFor(() => cp.uploads.length === 3, 'the upload')
    expect(bodies).toHaveLength(2)
    for (const b of bodies) expect(b).not.toHaveProperty('cache_prompt')
  })

  test('a job for a model the runtime does not serve is reported as a failure', async () => {
    const { cp, rt } = setup()
    const job = cp.addJob({ job_id: 'batch_wrong', input: chatLines(3).join('\n'), model: 'not-served' })
    start(cp, rt)
    await cp.waitFor(() => cp.failures.length === 1, 'the failure report')
    expect(cp.failures[0]).toMatchObject({ job_id: 'batch_wrong', assignment_id: job.assignment_id })
    expect(cp.failures[0].error).toContain('does not serve model not-served')
    expect(rt.requests).toBe(0)
  })

  test('the runtime dying mid-job is reported as a failure, and no more polls until it is back', async () => {
    const { cp, rt } = setup({ latencyMs: 5 })
    cp.addJob({ job_id: 'batch_dies', input: chatLines(400).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 2 })
    const ended = r.next('job_ended')
    await cp.waitFor(() => rt.requests > 20, 'requests flowing')
    await rt.stop()
    expect(await ended).toEqual({ type: 'job_ended', job_id: 'batch_dies', outcome: 'failed' })
    expect(cp.failures).toHaveLength(1)
    expect(cp.failures[0].error).toContain('runtime unreachable')
    expect(cp.uploads).toEqual([])
    const polls = cp.polls
    // The poll loop goes round twice, finds the runtime gone each time, and sends no poll.
    await r.next('poll_skipped', (e) => e.reason === 'runtime offline')
    await r.next('poll_skipped', (e) => e.reason === 'runtime offline')
    expect(cp.polls).toBe(polls)
    rt.restart()
    await cp.waitFor(() => cp.polls > polls, 'polling again once the runtime is back')
  })

  test('stops a job the heartbeat no longer assigns to it, without reporting anything', async () => {
    const { cp, rt } = setup({ latencyMs: 20 })
    cp.addJob({ job_id: 'batch_gone', input: chatLines(300).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 2 })
    const ended = r.next('job_ended')
    await cp.waitFor(() => rt.requests > 5, 'the job running')
    cp.unassign('batch_gone')
    expect(await ended).toEqual({ type: 'job_ended', job_id: 'batch_gone', outcome: 'dropped' })
    // The job has ended, so its executor has returned: no request of it can start any more.
    expect(rt.requests).toBeLessThan(300)
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('stops a job when the server refuses its progress with 403', async () => {
    const { cp, rt } = setup({ latencyMs: 20 })
    cp.refuseProgress = true
    cp.addJob({ job_id: 'batch_fenced', input: chatLines(300).join('\n'), model: MODEL })
    start(cp, rt, { concurrency: 2, progress_interval: 0.02 })
    await cp.waitFor(() => cp.progress.length > 0, 'a progress report')
    const seen = cp.heartbeats.length
    await cp.waitFor(
      () => cp.heartbeats.length > seen && cp.heartbeats.at(-1).activity === 'idle',
      'the job dropped',
    )
    expect(rt.requests).toBeLessThan(300)
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('an upload refused with 403 (requeued and re-claimed meanwhile) is dropped without a failure report', async () => {
    const { cp, rt } = setup()
    cp.failNext('/workers/upload-results', 403)
    cp.addJob({ job_id: 'batch_stale', input: chatLines(5).join('\n'), model: MODEL })
    const r = start(cp, rt)
    // The daemon has finished dealing with the job: dropped, so no failure report can follow.
    expect(await r.next('job_ended')).toEqual({
      type: 'job_ended',
      job_id: 'batch_stale',
      outcome: 'dropped',
    })
    expect(cp.injected).toContain('/workers/upload-results')
    expect(rt.requests).toBe(5)
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('an upload that meets a restarting server is retried until it lands', async () => {
    const { cp, rt } = setup()
    cp.failNext('/workers/upload-results', 503, 3)
    cp.addJob({ job_id: 'batch_retry', input: chatLines(5).join('\n'), model: MODEL })
    start(cp, rt)
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload')
    expect(cp.uploads[0]!.completed).toBe(5)
  })
})

describe('a server out of disk space (507, docs/api.md §15)', () => {
  test('the upload waits with the job still held: no try spent, heartbeats go on, then it lands', async () => {
    const { cp, rt } = setup()
    const timers = manualTimers()
    // More 507s than the 30 tries a failing upload gets: a full disk is waited out, never given up on.
    const FULL = 35
    cp.failNext('/workers/upload-results', 507, FULL, '7')
    cp.addJob({ job_id: 'batch_full', input: chatLines(3).join('\n'), model: MODEL })
    start(cp, rt, {}, fastDeps({ timers }))
    const waits = () => timers.asked.filter((ms) => ms === 7_000).length
    let from = 0
    let to = 0
    for (let i = 1; i <= FULL; i++) {
      await cp.waitFor(() => cp.injected.length === i && waits() === i, `507 number ${i} and its wait`)
      if (i === 1) from = cp.heartbeats.length
      to = cp.heartbeats.length
      timers.advance(7_000)
    }
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload')
    // The job stayed ours while it waited: the heartbeats went on, busy with it.
    const during = cp.heartbeats.slice(from, to)
    expect(during.length).toBeGreaterThanOrEqual(10)
    for (const h of during) expect(h).toMatchObject({ activity: 'busy', current_job_id: 'batch_full' })
    expect(cp.uploads[0]).toMatchObject({ job_id: 'batch_full', completed: 3, failed: 0 })
    expect(cp.failures).toEqual([])
  })

  test('a job lost while waiting is dropped without a failure report', async () => {
    const { cp, rt } = setup()
    const timers = manualTimers()
    cp.failNext('/workers/upload-results', 507, 1000, '7')
    cp.addJob({ job_id: 'batch_gone', input: chatLines(2).join('\n'), model: MODEL })
    const r = start(cp, rt, {}, fastDeps({ timers }))
    await cp.waitFor(() => timers.asked.includes(7_000), 'the first wait')
    cp.unassign('batch_gone')
    const ended = r.next('job_ended')
    // The next heartbeat no longer lists the job: the wait ends at once.
    timers.advance(100)
    expect(await ended).toEqual({ type: 'job_ended', job_id: 'batch_gone', outcome: 'dropped' })
    expect(cp.failures).toEqual([])
    expect(cp.uploads).toEqual([])
  })
})

describe('shutdown', () => {
  test('SIGTERM lets the running job finish and upload, polls no more, and exits 0', async () => {
    const { cp, rt } = setup({ latencyMs: 20 })
    cp.addJob({ job_id: 'batch_finish', input: chatLines(20).join('\n'), model: MODEL })
    cp.addJob({ job_id: 'batch_next', input: chatLines(2).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 1, shutdown_grace: 30 })
    await cp.waitFor(() => rt.requests > 2, 'the job running')
    r.agent.shutdown()
    expect(await r.done).toBe(0)
    expect(cp.uploads.map((u) => u.job_id)).toEqual(['batch_finish'])
    expect(cp.uploads[0]!.completed).toBe(20)
    expect(cp.failures).toEqual([])
  })

  test('past the grace period the job is reported failed so the batch is requeued, and the exit is 0', async () => {
    const { cp, rt } = setup({ latencyMs: 50 })
    cp.addJob({ job_id: 'batch_cut', input: chatLines(200).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 1, shutdown_grace: 0.1 })
    await cp.waitFor(() => rt.requests > 1, 'the job running')
    r.agent.shutdown()
    expect(await r.done).toBe(0)
    expect(cp.failures).toHaveLength(1)
    expect(cp.failures[0]).toMatchObject({
      job_id: 'batch_cut',
      error: 'worker shut down before finishing the job',
    })
    expect(cp.uploads).toEqual([])
  })
})

describe('model pulls (heartbeat pull_models)', () => {
  test('pulls a catalogued model, reports model-progress and downloading_model, then advertises it', async () => {
    const weights = 'ab'.repeat(32)
    const key = `gk-${randomBase62(40)}`
    rememberSecret(key)
    const cp = startFakeControlPlane({ key })
    const rt = startFakeRuntime({
      ollama: {
        models: [],
        library: {
          'qwen2.5:0.5b': {
            tag: { name: 'qwen2.5:0.5b', model: 'qwen2.5:0.5b', size: 397821319, digest: 'c'.repeat(64) },
            show: { modelfile: `FROM /root/.ollama/models/blobs/sha256-${weights}\n` },
            layers: [{ digest: `sha256:${weights}`, size: 397807936 }],
          },
        },
      },
    })
    cleanups.push(
      () => cp.stop(),
      () => rt.stop(),
    )
    start(cp, rt, { runtime: 'ollama', engine: 'ollama', max_download_gb: 10, progress_interval: 0 })
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    expect(cp.registrations[0].max_download_gb).toBe(10)
    expect(cp.heartbeats[0].inventory).toEqual([])
    cp.askToPull([
      {
        catalogue_id: 'qwen2-5-0-5b-q4km',
        runtime: 'ollama',
        runtime_model_id: 'qwen2.5:0.5b',
        digest: `sha256:${weights}`,
        size_gb: 0.4,
      },
    ])
    await cp.waitFor(() => cp.modelProgress.some((p) => p.status === 'completed'), 'the pull to complete')
    const statuses = cp.modelProgress.map((p) => p.status)
    expect(statuses).toContain('downloading')
    expect(statuses).toContain('verifying')
    expect(cp.modelProgress[0]).toMatchObject({ model: 'qwen2.5:0.5b', digest: `sha256:${weights}` })
    const dl = cp.modelProgress.filter((p) => p.status === 'downloading').at(-1)
    expect(dl).toMatchObject({ completed_bytes: 397807936, total_bytes: 397807936 })
    expect(cp.heartbeats.some((h) => h.activity === 'downloading_model')).toBe(true)
    await cp.waitFor(
      () =>
        cp.heartbeats
          .at(-1)
          .inventory.some((i: any) => i.local_name === 'qwen2.5:0.5b' && i.sha256 === weights),
      'the pulled model in the inventory',
    )
    expect(rt.pulls).toEqual(['qwen2.5:0.5b'])
  })

  test('a poll answer’s pull_models starts the download as a heartbeat’s would', async () => {
    const key = `gk-${randomBase62(40)}`
    rememberSecret(key)
    const cp = startFakeControlPlane({ key })
    const rt = startFakeRuntime({ ollama: { models: [], library: {} } })
    cleanups.push(
      () => cp.stop(),
      () => rt.stop(),
    )
    cp.askToPullAtPoll([
      { catalogue_id: 'x', runtime: 'ollama', runtime_model_id: 'from-poll:1', digest: null, size_gb: 1 },
    ])
    start(cp, rt, { runtime: 'ollama', engine: 'ollama', max_download_gb: 10, poll_wait: 0 })
    // The library lacks it, so the pull fails: what matters is that the poll's ask started it.
    await cp.waitFor(
      () => cp.modelProgress.some((p) => p.model === 'from-poll:1'),
      'the pull the poll asked for',
    )
    expect(cp.modelProgress.at(-1)).toMatchObject({ model: 'from-poll:1', status: 'failed' })
  })

  test('a failed pull is reported as failed', async () => {
    const key = `gk-${randomBase62(40)}`
    rememberSecret(key)
    const cp = startFakeControlPlane({ key })
    const rt = startFakeRuntime({ ollama: { models: [], library: {} } })
    cleanups.push(
      () => cp.stop(),
      () => rt.stop(),
    )
    start(cp, rt, { runtime: 'ollama', engine: 'ollama', max_download_gb: 10 })
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    cp.askToPull([
      { catalogue_id: 'x', runtime: 'ollama', runtime_model_id: 'missing:1', digest: null, size_gb: 1 },
    ])
    await cp.waitFor(() => cp.modelProgress.some((p) => p.status === 'failed'), 'the failure')
    expect(cp.modelProgress.at(-1)).toEqual({
      worker_id: expect.any(String),
      model: 'missing:1',
      status: 'failed',
      error: 'ollama pull failed: pull model manifest: file does not exist',
    })
    // docs/worker.md "Downloads": asked again at once (a server that lost its back-off), the daemon
    // keeps its own: nothing fetched, the refusal reported with the reason.
    cp.askToPull([
      { catalogue_id: 'x', runtime: 'ollama', runtime_model_id: 'missing:1', digest: null, size_gb: 1 },
    ])
    await cp.waitFor(() => cp.modelProgress.some((p) => p.cause === 'backed_off'), 'the refusal')
    expect(cp.modelProgress.at(-1)).toEqual({
      worker_id: expect.any(String),
      model: 'missing:1',
      status: 'failed',
      cause: 'backed_off',
      error: expect.stringMatching(
        /^not fetched again before \d{4}-\d\d-\d\dT.*Z: ollama pull failed: pull model manifest: file does not exist$/,
      ),
    })
    expect(rt.pulls).toEqual(['missing:1'])
  })

  test('a pull stopped by the daemon shutting down is reported stopped, not failed for good', async () => {
    const key = `gk-${randomBase62(40)}`
    rememberSecret(key)
    const cp = startFakeControlPlane({ key })
    let release = () => {}
    const held = new Promise<void>((r) => {
      release = r
    })
    const slow = {
      tag: { name: 'slow:1', size: 10, digest: 'e'.repeat(64) },
      show: { modelfile: `FROM /b/sha256-${'1'.repeat(64)}` },
      layers: [{ digest: `sha256:${'1'.repeat(64)}`, size: 10 }],
    }
    const rt = startFakeRuntime({ ollama: { models: [], library: { 'slow:1': slow }, pullHold: () => held } })
    cleanups.push(
      () => cp.stop(),
      async () => {
        release()
        await rt.stop()
      },
    )
    const running = start(cp, rt, { runtime: 'ollama', engine: 'ollama', max_download_gb: 10 })
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    cp.askToPull([
      { catalogue_id: 'x', runtime: 'ollama', runtime_model_id: 'slow:1', digest: null, size_gb: 1 },
    ])
    await cp.waitFor(() => rt.pulls.length === 1, 'the pull under way')
    running.agent.shutdown(false)
    await cp.waitFor(() => cp.modelProgress.some((p) => p.status === 'failed'), 'the report')
    expect(cp.modelProgress.at(-1)).toMatchObject({ model: 'slow:1', status: 'failed', cause: 'stopped' })
  })

  test('model-progress reports go one at a time, in order: a slow answer never lets a later step overtake', async () => {
    const calls: string[] = []
    const answers: (() => void)[] = []
    const report = serially(
      (step: string) =>
        new Promise<void>((resolve) => {
          calls.push(step)
          answers.push(resolve)
        }),
    )
    const all = ['downloading', 'verifying', 'completed'].map((s) => report(s))
    // The first is still unanswered: nothing after it has been sent.
    await Promise.resolve()
    expect(calls).toEqual(['downloading'])
    answers[0]!()
    await until('the second report sent', () => calls.length === 2)
    expect(calls).toEqual(['downloading', 'verifying'])
    answers[1]!()
    await until('the third report sent', () => calls.length === 3)
    answers[2]!()
    await Promise.all(all)
    expect(calls).toEqual(['downloading', 'verifying', 'completed'])
  })

  test('an openai runtime cannot pull and ignores the request', async () => {
    const { cp, rt } = setup()
    start(cp, rt)
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    cp.askToPull([{ catalogue_id: 'x', runtime: 'openai', runtime_model_id: 'm', digest: null, size_gb: 1 }])
    const n = cp.heartbeats.length
    await cp.waitFor(() => cp.heartbeats.length > n + 2, 'more heartbeats')
    expect(cp.modelProgress).toEqual([])
    expect(cp.heartbeats.every((h) => h.activity === 'idle')).toBe(true)
  })
})

describe('life cycle and clock', () => {
  test('the life cycle moves only along its table', () => {
    expect(() => checkMove('created', 'running')).toThrow(IllegalAgentMove)
    expect(() => checkMove('stopped', 'starting')).toThrow('illegal agent state change stopped → starting')
    expect(() => checkMove('draining', 'running')).toThrow(IllegalAgentMove)
    for (const [from, tos] of Object.entries(AGENT_MOVES))
      for (const to of tos) expect(() => checkMove(from as AgentState, to)).not.toThrow()
  })

  test('a graceful stop with a job running passes through every state in order', async () => {
    const { cp, rt } = setup({ latencyMs: 10 })
    cp.addJob({ job_id: 'batch_states', input: chatLines(20).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 1, shutdown_grace: 30 })
    await cp.waitFor(() => rt.requests > 1, 'the job running')
    expect(r.agent.status).toBe('running')
    r.agent.shutdown()
    expect(await r.done).toBe(0)
    expect(r.events.filter((e) => e.type === 'state').map((e) => (e as { state: string }).state)).toEqual([
      'starting',
      'running',
      'draining',
      'stopping',
      'stopped',
    ])
    expect(cp.uploads.map((u) => u.job_id)).toEqual(['batch_states'])
  })

  test('a shutdown before run() ends at once', async () => {
    const { cp, rt } = setup()
    const agent = new Agent(daemonOptions(cp.url, cp.key, rt.url), fastDeps())
    agent.shutdown()
    expect(await agent.run()).toBe(0)
    expect(agent.status).toBe('stopped')
    expect(cp.registrations).toEqual([])
  })

  test('an idle daemon polls once per --poll-interval of its clock, and not before', async () => {
    const { cp, rt } = setup()
    const timers = manualTimers()
    start(cp, rt, { poll_interval: 10, poll_wait: 0 }, fastDeps({ timers }))
    await cp.waitFor(() => cp.polls === 1 && timers.asked.includes(10_000), 'the poll loop waiting 10 s')
    timers.advance(9_999)
    // Only the clock can end that wait, and it has not reached it.
    expect(cp.polls).toBe(1)
    timers.advance(1)
    await cp.waitFor(() => cp.polls === 2, 'the second poll')
  })

  test('the grace period runs on the clock: the job is reported failed only when it is over', async () => {
    const { cp, rt } = setup({ latencyMs: 20 })
    const timers = manualTimers()
    cp.addJob({ job_id: 'batch_grace', input: chatLines(400).join('\n'), model: MODEL })
    const r = start(cp, rt, { concurrency: 1, shutdown_grace: 30 }, fastDeps({ timers }))
    await cp.waitFor(() => rt.requests > 1, 'the job running')
    r.agent.shutdown()
    await cp.waitFor(() => timers.asked.includes(30_000), 'the drain waiting 30 s')
    expect(r.agent.status).toBe('draining')
    expect(cp.failures).toEqual([])
    const ended = r.next('job_ended')
    timers.advance(30_000)
    expect(await ended).toEqual({ type: 'job_ended', job_id: 'batch_grace', outcome: 'failed' })
    expect(await r.done).toBe(0)
    expect(cp.failures[0]).toMatchObject({
      job_id: 'batch_grace',
      error: 'worker shut down before finishing the job',
    })
  })

  test('a control plane’s Retry-After is honoured, capped as the executor caps it', async () => {
    const { cp, rt } = setup()
    const timers = manualTimers()
    cp.failNext('/workers/upload-results', 503, 2, '3600')
    cp.addJob({ job_id: 'batch_hint', input: chatLines(3).join('\n'), model: MODEL })
    start(cp, rt, {}, fastDeps({ timers, backoff: { baseMs: 5, maxMs: 50, maxRetryAfterMs: 20_000 } }))
    await cp.waitFor(() => timers.asked.includes(20_000), 'the upload waiting for the capped hint')
    expect(timers.asked).not.toContain(3_600_000)
    timers.advance(20_000)
    await cp.waitFor(
      () => cp.injected.length === 2 && timers.asked.filter((ms) => ms === 20_000).length === 2,
      'the second wait',
    )
    timers.advance(20_000)
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload')
    // The default cap is the executor's.
    expect(retryDelay(0, { baseMs: 5, maxMs: 50 }, 3_600_000)).toBe(DEFAULT_MAX_RETRY_AFTER_MS)
  })
})

test('a digest found after registration is reported at once, not at the next 30 s heartbeat', async () => {
  const key = `gk-${randomBase62(40)}`
  rememberSecret(key)
  const cp = startFakeControlPlane({ key, heartbeatSeconds: 3600 })
  let announce = () => {}
  const item = {
    local_name: MODEL,
    sha256: 'cd'.repeat(32),
    size_bytes: 5,
    loaded: true,
    runtime: 'openai' as const,
  }
  let inventory: (typeof item)[] = []
  const runtime: Runtime = {
    kind: 'openai',
    engine: 'openai',
    baseUrl: 'http://127.0.0.1:9',
    prepare: async () => {},
    snapshot: async () => ({ status: 'online', inventory, models: [MODEL], loaded: [MODEL] }),
    serves: () => true,
    onInventoryChange: (listener) => {
      announce = listener
    },
  }
  const r = runAgent(daemonOptions(cp.url, key, runtime.baseUrl), fastDeps({ runtime }))
  cleanups.push(
    () => cp.stop(),
    async () => {
      r.agent.shutdown(true)
      await r.done
    },
  )
  await cp.waitFor(() => cp.heartbeats.length === 1, 'the first heartbeat')
  expect(cp.heartbeats[0].inventory).toEqual([])
  inventory = [item]
  announce()
  await cp.waitFor(() => cp.heartbeats.length === 2, 'a heartbeat carrying the digest')
  expect(cp.heartbeats[1].inventory).toEqual([item])
})
