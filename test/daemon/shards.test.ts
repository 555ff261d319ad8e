import { afterEach, describe, expect, test } from 'bun:test'
import { randomBase62 } from '../../src/lib/ids'
import { chatLines, daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { startFakeControlPlane } from '../helpers/fake-control-plane'
import { type FakeRuntimeOptions, startFakeRuntime } from '../helpers/fake-runtime'
import { rememberSecret } from '../helpers/secrets'

// The daemon and shards (docs/api.md §16) against the scripted control plane: it declares them, runs a
// shard exactly as handed out, drops a shard whose batch failed elsewhere, and keeps the engine
// busy across job boundaries by claiming the next job while the last requests of the previous one
// are still in flight.

const MODEL = 'Qwen/Qwen2.5-0.5B-Instruct'
let cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
})

type Trace = { path: string; job_id?: string }

function setup(rtOpts: FakeRuntimeOptions = {}, trace?: (e: Trace) => void) {
  const key = `gk-${randomBase62(40)}`
  rememberSecret(key)
  const cp = startFakeControlPlane({ key, trace })
  const rt = startFakeRuntime({ models: [MODEL], ...rtOpts })
  cleanups.push(
    () => cp.stop(),
    () => rt.stop(),
  )
  const start = (o: Parameters<typeof daemonOptions>[3] = {}) => {
    const running = runAgent(daemonOptions(cp.url, cp.key, rt.url, o), fastDeps())
    cleanups.push(async () => {
      running.agent.shutdown(true)
      await running.done
    })
    return running
  }
  return { cp, rt, start }
}

/** The lines of a shard: custom_ids req-<first>…, as the server cuts them from its batch. */
const shardLines = (first: number, n: number, tag = 'p') =>
  chatLines(first + n, 'catalogue-slug', (i) => `${tag} ${i}`).slice(first)

describe('shards (docs/api.md §16)', () => {
  test('the daemon declares shards at registration, with room for the current shard and the next', async () => {
    const { cp, start } = setup()
    start()
    await cp.waitFor(() => cp.heartbeats.length > 0, 'a heartbeat')
    expect(cp.registrations[0]).toMatchObject({ capabilities: { shards: true }, max_concurrent_jobs: 2 })
    // Heartbeats carry the requests kept in flight.
    expect(cp.heartbeats[0].concurrency).toBe(4)
  })

  test('with --shards false it declares nothing and takes one whole batch at a time', async () => {
    const { cp, start } = setup()
    start({ shards: false, max_jobs: 1 })
    await cp.waitFor(() => cp.registrations.length > 0, 'the registration')
    expect(cp.registrations[0].capabilities).toBeUndefined()
    expect(cp.registrations[0].max_concurrent_jobs).toBe(1)
  })

  test('runs a shard: input_path fetched as given, progress and upload under the shard’s job_id and assignment_id', async () => {
    const { cp, rt, start } = setup({ latencyMs: 5 })
    const job = cp.addJob({
      job_id: 'shard_0003',
      batch_id: 'batch_big',
      shard: { index: 3, first_request: 300, requests: 40 },
      input: shardLines(300, 40).join('\n'),
      model: MODEL,
    })
    start({ progress_interval: 0.01, concurrency: 2 })
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload')
    expect(cp.downloads.map((d) => d.path)).toEqual(['/v1/files/file-batch_big/content?shard=shard_0003'])
    expect(cp.uploads[0]).toMatchObject({
      job_id: 'shard_0003',
      assignment_id: job.assignment_id,
      completed: 40,
      failed: 0,
    })
    expect(cp.uploads[0]!.lines.map((l) => l.custom_id).sort()).toEqual(
      Array.from({ length: 40 }, (_, i) => `req-${300 + i}`).sort(),
    )
    expect(cp.progress.length).toBeGreaterThan(0)
    for (const p of cp.progress)
      expect(p).toMatchObject({ job_id: 'shard_0003', assignment_id: job.assignment_id, total_prompts: 40 })
    expect(rt.requests).toBe(40)
    expect(cp.failures).toEqual([])
  })

  test('409 batch_not_in_progress on progress: the job is dropped quietly, its requests stop, the next job runs', async () => {
    const { cp, rt, start } = setup({ latencyMs: 20 })
    cp.addJob({
      job_id: 'shard_doomed',
      batch_id: 'batch_failed',
      shard: { index: 0, first_request: 0, requests: 400 },
      input: shardLines(0, 400).join('\n'),
      model: MODEL,
    })
    const r = start({ progress_interval: 0.02, concurrency: 2 })
    const ended = r.next('job_ended')
    await cp.waitFor(() => rt.requests > 4, 'the shard running')
    cp.failBatch('shard_doomed')
    expect(await ended).toEqual({ type: 'job_ended', job_id: 'shard_doomed', outcome: 'dropped' })
    expect(cp.conflicts[0]).toEqual({ path: '/workers/progress', job_id: 'shard_doomed' })
    // The job has ended, so no request of it can start any more.
    expect(rt.requests).toBeLessThan(400)
    // Its requests are freed: another job runs on the same limit.
    cp.addJob({ job_id: 'batch_next', input: chatLines(6).join('\n'), model: MODEL })
    await cp.waitFor(() => cp.uploads.length === 1, 'the next job uploaded')
    expect(cp.uploads[0]).toMatchObject({ job_id: 'batch_next', completed: 6 })
    expect(cp.failures).toEqual([])
  })

  test('409 batch_not_in_progress on upload: dropped once, no retry, no report-failure', async () => {
    const { cp, start } = setup()
    cp.addJob({
      job_id: 'shard_late',
      batch_id: 'batch_failed',
      shard: { index: 1, first_request: 5, requests: 5 },
      input: shardLines(5, 5).join('\n'),
      model: MODEL,
    })
    cp.failBatch('shard_late')
    const r = start({ progress_interval: 3600 })
    expect(await r.next('job_ended')).toEqual({ type: 'job_ended', job_id: 'shard_late', outcome: 'dropped' })
    expect(cp.conflicts).toEqual([{ path: '/workers/upload-results', job_id: 'shard_late' }])
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('409 shard_done_elsewhere (a backup race lost) on progress: dropped quietly, its requests stop, nothing reported', async () => {
    const { cp, rt, start } = setup({ latencyMs: 20 })
    const job = cp.addJob({
      job_id: 'shard_raced',
      batch_id: 'batch_big',
      shard: { index: 2, first_request: 0, requests: 400 },
      backup: true,
      input: shardLines(0, 400).join('\n'),
      model: MODEL,
    })
    const r = start({ progress_interval: 0.02, concurrency: 2 })
    const ended = r.next('job_ended')
    await cp.waitFor(() => rt.requests > 4, 'the copy running')
    cp.doneElsewhere('shard_raced')
    expect(await ended).toEqual({ type: 'job_ended', job_id: 'shard_raced', outcome: 'dropped' })
    expect(cp.conflicts[0]).toEqual({ path: '/workers/progress', job_id: 'shard_raced' })
    expect(cp.progress.every((p) => p.assignment_id === job.assignment_id)).toBe(true)
    expect(rt.requests).toBeLessThan(400)
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('409 shard_done_elsewhere on upload: dropped once, no retry, no report-failure', async () => {
    // The engine holds the copy's first request until the other copy has finished.
    let finishedElsewhere: () => void = () => {}
    const elsewhere = new Promise<void>((r) => {
      finishedElsewhere = r
    })
    const { cp, start } = setup({ hold: () => elsewhere })
    cp.addJob({
      job_id: 'shard_second',
      batch_id: 'batch_big',
      shard: { index: 1, first_request: 5, requests: 5 },
      input: shardLines(5, 5).join('\n'),
      model: MODEL,
    })
    const r = start({ progress_interval: 3600 })
    await cp.waitFor(() => cp.downloads.length === 1, 'the input downloaded')
    cp.doneElsewhere('shard_second')
    finishedElsewhere()
    expect(await r.next('job_ended')).toEqual({
      type: 'job_ended',
      job_id: 'shard_second',
      outcome: 'dropped',
    })
    expect(cp.conflicts).toEqual([{ path: '/workers/upload-results', job_id: 'shard_second' }])
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('409 shard_done_elsewhere on the input download (the other copy finished first): dropped, nothing run or reported', async () => {
    const { cp, rt, start } = setup()
    cp.addJob({
      job_id: 'shard_late_copy',
      batch_id: 'batch_big',
      shard: { index: 4, first_request: 0, requests: 5 },
      backup: true,
      input: shardLines(0, 5).join('\n'),
      model: MODEL,
    })
    cp.doneElsewhere('shard_late_copy')
    const r = start({ progress_interval: 3600 })
    expect(await r.next('job_ended')).toEqual({
      type: 'job_ended',
      job_id: 'shard_late_copy',
      outcome: 'dropped',
    })
    expect(cp.downloads).toHaveLength(1)
    expect(cp.conflicts).toEqual([{ path: '/v1/files/file-batch_big/content', job_id: 'shard_late_copy' }])
    expect(rt.requests).toBe(0)
    expect(cp.uploads).toEqual([])
    expect(cp.failures).toEqual([])
  })

  test('the next job is claimed and running while the previous job’s last requests are in flight', async () => {
    // The engine holds the first job's last request until it sees one of the second job (or a
    // generous fallback passes): a daemon that claimed only after uploading would show the upload
    // of the first job before any request of the second.
    const events: string[] = []
    let secondSeen: () => void = () => {}
    const second = new Promise<void>((r) => {
      secondSeen = r
    })
    const content = (body: any) => String(body?.messages?.[0]?.content ?? '')
    const { cp, start } = setup(
      {
        latencyMs: 5,
        onRequest: (body) => {
          const c = content(body)
          events.push(`engine ${c}`)
          if (c.startsWith('two ')) secondSeen()
        },
        hold: (body) => (content(body) === 'one 19' ? Promise.race([second, Bun.sleep(2_000)]) : undefined),
      },
      (e) => {
        if (e.path === '/workers/upload-results') events.push(`upload ${e.job_id}`)
      },
    )
    cp.addJob({
      job_id: 'shard_one',
      batch_id: 'batch_x',
      shard: { index: 0, first_request: 0, requests: 20 },
      input: shardLines(0, 20, 'one').join('\n'),
      model: MODEL,
    })
    cp.addJob({
      job_id: 'shard_two',
      batch_id: 'batch_x',
      shard: { index: 1, first_request: 20, requests: 20 },
      input: shardLines(20, 20, 'two').join('\n'),
      model: MODEL,
    })
    start({ concurrency: 4 })
    await cp.waitFor(() => cp.uploads.length === 2, 'both shards uploaded', 15_000)
    const firstOfTwo = events.findIndex((e) => e.startsWith('engine two '))
    const uploadOfOne = events.indexOf('upload shard_one')
    expect(firstOfTwo).toBeGreaterThanOrEqual(0)
    expect(firstOfTwo).toBeLessThan(uploadOfOne)
    expect(cp.uploads.map((u) => [u.job_id, u.completed])).toEqual([
      ['shard_one', 20],
      ['shard_two', 20],
    ])
  })

  test('no second job is claimed while the first still has requests to start', async () => {
    const { cp, rt, start } = setup({ latencyMs: 20 })
    cp.addJob({ job_id: 'batch_a', input: chatLines(40).join('\n'), model: MODEL })
    cp.addJob({ job_id: 'batch_b', input: chatLines(4).join('\n'), model: MODEL })
    const r = start({ concurrency: 2 })
    await cp.waitFor(() => rt.requests > 2, 'job a running')
    const polls = cp.polls
    // The poll loop goes round while batch_a still has lines to start, and sends no poll.
    await r.next('poll_skipped', (e) => e.reason === 'requests left to start')
    await r.next('poll_skipped', (e) => e.reason === 'requests left to start')
    expect(cp.polls).toBe(polls)
    await cp.waitFor(() => cp.uploads.length === 2, 'both uploaded')
  })
})
