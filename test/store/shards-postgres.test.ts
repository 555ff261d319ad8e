import { afterEach, describe, expect, test } from 'bun:test'
import type { BatchShardRow } from '../../src/db/schema'
import { packLineOffsets } from '../../src/store/batches'
import type { ClaimRequest } from '../../src/store/queue'
import { lit, type StoreHarness, storeEngines } from '../helpers/stores'

// Shards on the PostgreSQL engine (docs/api.md §16), at the store: claims of many workers at once on
// several connections never share a request (and back each shard up once), guided sizes,
// max_concurrent_jobs counting shards and backup copies, the per-shard requeue, the request-line
// index and the heartbeat's assigned ids.

const openPg = storeEngines.find(([kind]) => kind === 'postgres')![1]

const TOTAL = 1000
/** Request line i starts at byte 7·i + i² (any increasing offsets). */
const offsets = Array.from({ length: TOTAL }, (_, i) => 7 * i + i * i)
const NOW = 1000
const CUTOFF = 900

async function seed(h: StoreHarness) {
  const hex = packLineOffsets(offsets).toString('hex')
  await h.exec(`
    INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
      VALUES ('user_a', 'a@x.test', 'h', 'A', 1, 1), ('user_b', 'b@x.test', 'h', 'B', 1, 1);
    INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'A', TRUE, 1);
    INSERT INTO workers (id, org_id, name, status, activity, loaded_models, shards, registered_at, last_seen_at)
      VALUES ('wrk_1', 'org_a', 'w1', 'online', 'idle', '[]', TRUE, 1, ${NOW}),
             ('wrk_2', 'org_a', 'w2', 'online', 'idle', '[]', TRUE, 1, ${NOW}),
             ('wrk_3', 'org_a', 'w3', 'online', 'idle', '[]', TRUE, 1, ${NOW}),
             ('wrk_4', 'org_a', 'w4', 'online', 'idle', '[]', TRUE, 1, ${NOW}),
             ('wrk_whole', 'org_a', 'w5', 'online', 'idle', '[]', FALSE, 1, ${NOW}),
             ('wrk_silent', 'org_a', 'w6', 'online', 'idle', '[]', TRUE, 1, ${CUTOFF});
    INSERT INTO worker_models (worker_id, name)
      SELECT id, 'm-a' FROM workers;
    INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
        request_counts_total, created_at, updated_at)
      VALUES ('batch_big', 'user_a', 'file-x', '/v1/chat/completions', '24h', 'm-a', 'validated', ${TOTAL}, 1, 1);
    INSERT INTO batch_line_index (batch_id, offsets) VALUES ('batch_big', decode('${hex}', 'hex'));`)
}

/** A small batch of user_b: it runs whole (at most twice the smallest shard). */
const seedSmall = (h: StoreHarness, id: string) =>
  h.exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, created_at, updated_at)
    VALUES (${lit(id)}, 'user_b', 'file-x', '/v1/chat/completions', '24h', 'm-a', 'validated', 5, 2, 2)`)

const bounds = { min: 10, max: 1000 }

const claim = (h: StoreHarness, workerId: string, o: Partial<ClaimRequest<string>> = {}) =>
  h.store.queue.claim({
    workerId,
    orgId: 'org_a',
    maxConcurrent: 1000,
    candidates: [{ model: 'm-a', loaded: false, match: 'm-a', names: ['m-a'] }],
    now: NOW,
    shards: { bounds, cutoff: CUTOFF, backups: true },
    ...o,
  })

const held = async (h: StoreHarness, workerId: string) =>
  Number(
    (
      await h.one<{ n: number }>(`SELECT
        (SELECT count(*) FROM batch_assignments WHERE worker_id = ${lit(workerId)} AND completed_at IS NULL)
        + (SELECT count(*) FROM batch_shards WHERE worker_id = ${lit(workerId)} AND status = 'running') AS n`)
    ).n,
  )

describe('postgres shards (docs/api.md §16)', () => {
  let h: StoreHarness
  afterEach(async () => {
    await h?.close()
  })

  test('guided sizes: each claim takes ceil(unclaimed ÷ online shard-capable hosts), bounded; input order', async () => {
    h = await openPg()
    await seed(h)
    const sizes: number[] = []
    let next = 0
    for (let c = await claim(h, 'wrk_1'); c; c = await claim(h, 'wrk_1')) {
      expect(c.shard!.first_request).toBe(next)
      expect(c.shard!.shard_index).toBe(sizes.length)
      expect(c.assignmentId).toBe(c.shard!.assignment_id!)
      next += c.shard!.requests
      sizes.push(c.shard!.requests)
    }
    // Four eligible workers: wrk_whole did not declare shards, wrk_silent is silent.
    expect(sizes).toEqual([250, 188, 141, 106, 79, 59, 45, 33, 25, 19, 14, 11, 10, 10, 10])
    const b = await h.one<{ status: string; split: boolean; next_request: number }>(
      "SELECT status, split, next_request FROM batches WHERE id = 'batch_big'",
    )
    expect(b).toEqual({ status: 'in_progress', split: true, next_request: TOTAL })
    expect(await h.store.queue.shardTallies(['batch_big'])).toEqual(
      new Map([['batch_big', { total: 15, waiting: 0, running: 15, done: 0 }]]),
    )
  })

  test('many workers claiming at once never share a request: the shards cover the batch exactly once, each backed up once', async () => {
    h = await openPg()
    await seed(h)
    const got: BatchShardRow[] = []
    const copies: { worker: string; shard: BatchShardRow; assignmentId: string }[] = []
    const workers = ['wrk_1', 'wrk_2', 'wrk_3', 'wrk_4']
    // Eight concurrent pollers per worker, each polling until nothing is left: shards while any
    // request is left to cut, then backup copies (docs/api.md §16).
    await Promise.all(
      workers.flatMap((w) =>
        Array.from({ length: 8 }, async () => {
          for (let c = await claim(h, w); c; c = await claim(h, w)) {
            if (c.backup) copies.push({ worker: w, shard: c.shard!, assignmentId: c.assignmentId })
            else got.push(c.shard!)
          }
        }),
      ),
    )
    // Every shard got exactly one backup, never on its own holder, each with its own assignment.
    expect(copies.map((c) => c.shard.id).sort()).toEqual(got.map((s) => s.id).sort())
    for (const c of copies) {
      const shard = got.find((s) => s.id === c.shard.id)!
      expect(c.worker).not.toBe(shard.worker_id)
      expect(c.shard.backup_worker_id).toBe(c.worker)
      expect(c.assignmentId).toBe(c.shard.backup_assignment_id!)
      expect(c.assignmentId).not.toBe(shard.assignment_id)
    }
    expect(new Set(got.map((s) => s.id)).size).toBe(got.length)
    expect(got.reduce((n, s) => n + s.requests, 0)).toBe(TOTAL)
    const byFirst = [...got].sort((a, b) => a.first_request - b.first_request)
    let next = 0
    for (const s of byFirst) {
      expect(s.first_request).toBe(next)
      next += s.requests
    }
    expect(byFirst.map((s) => s.shard_index).sort((a, b) => a - b)).toEqual(byFirst.map((_, i) => i))
    const rows = await h.all<{ worker_id: string }>(
      "SELECT worker_id FROM batch_shards WHERE batch_id = 'batch_big' AND status = 'running'",
    )
    expect(rows.length).toBe(got.length)
  })

  test('max_concurrent_jobs counts held shards: twelve polls of one worker at once, limit 3', async () => {
    h = await openPg()
    await seed(h)
    await seedSmall(h, 'batch_s1')
    await seedSmall(h, 'batch_s2')
    let got = await Promise.all(Array.from({ length: 12 }, () => claim(h, 'wrk_1', { maxConcurrent: 3 })))
    expect(got.filter((g) => g !== null).length).toBe(3)
    expect(await held(h, 'wrk_1')).toBe(3)
    // Everything given back (the shards done, whole batches waiting again); then a shard and a whole
    // batch held, one place left: of twelve polls at once, one gets it.
    await h.exec(`UPDATE batch_shards SET status = 'done' WHERE worker_id = 'wrk_1';
      DELETE FROM batch_assignments; UPDATE batches SET status = 'validated' WHERE id <> 'batch_big'`)
    expect(await held(h, 'wrk_1')).toBe(0)
    const shard = await claim(h, 'wrk_1', { maxConcurrent: 3 })
    const whole = await claim(h, 'wrk_1', { maxConcurrent: 3 })
    // docs/api.md §14 fair share counts the held shard: user_b's whole batch comes next.
    expect(shard?.shard).not.toBeNull()
    expect(whole?.shard).toBeNull()
    got = await Promise.all(Array.from({ length: 12 }, () => claim(h, 'wrk_1', { maxConcurrent: 3 })))
    expect(got.filter((g) => g !== null).length).toBe(1)
    expect(await held(h, 'wrk_1')).toBe(3)
    expect(await claim(h, 'wrk_1', { maxConcurrent: 3 })).toBeNull()
  })

  test('max_concurrent_jobs counts backup copies: twelve polls of one worker at once for backups, limit 2', async () => {
    h = await openPg()
    await seed(h)
    // wrk_1 cuts the whole batch; then wrk_2 may only take backup copies of its shards.
    let shards = 0
    for (let c = await claim(h, 'wrk_1'); c; c = await claim(h, 'wrk_1')) shards++
    expect(shards).toBeGreaterThan(2)
    const got = await Promise.all(Array.from({ length: 12 }, () => claim(h, 'wrk_2', { maxConcurrent: 2 })))
    const copies = got.filter((g) => g !== null)
    expect(copies.length).toBe(2)
    expect(copies.every((c) => c.backup)).toBe(true)
    expect(new Set(copies.map((c) => c.shard!.id)).size).toBe(2)
    // The two oldest held shards, in cut order (all were handed out in the same second).
    expect(copies.map((c) => c.shard!.shard_index).sort()).toEqual([0, 1])
    const { n } = await h.one<{ n: number }>(
      "SELECT count(*)::int AS n FROM batch_shards WHERE backup_worker_id = 'wrk_2' AND status = 'running'",
    )
    expect(n).toBe(2)
    expect(await claim(h, 'wrk_2', { maxConcurrent: 2 })).toBeNull()
  })

  test('a worker without capabilities.shards never gets a split batch, whole or in part', async () => {
    h = await openPg()
    await seed(h)
    expect((await claim(h, 'wrk_1'))?.shard).not.toBeNull()
    // The requeue of the only running shard brings the split batch back to validated.
    const [s] = await h.store.queue.shardsOf('batch_big')
    await h.store.queue.reportFailure({
      jobId: s!.id,
      workerId: 'wrk_1',
      assignmentId: s!.assignment_id!,
      error: 'boom',
      now: NOW,
    })
    expect((await h.store.batches.get('batch_big', null))?.status).toBe('validated')
    expect(await claim(h, 'wrk_whole', { shards: undefined })).toBeNull()
    await seedSmall(h, 'batch_s1')
    const whole = await claim(h, 'wrk_whole', { shards: undefined })
    expect(whole?.batch.id).toBe('batch_s1')
    expect(whole?.shard).toBeNull()
  })

  test('a failed shard waits and is offered first; the batch keeps its other shards; exhaustion fails it', async () => {
    h = await openPg()
    await seed(h)
    const first = (await claim(h, 'wrk_1'))!
    const second = (await claim(h, 'wrk_2'))!
    await h.store.fleet.recordProgress({
      workerId: 'wrk_1',
      jobId: first.shard!.id,
      assignmentId: first.assignmentId,
      total: undefined,
      completed: 7,
      failed: 1,
      now: NOW,
    })
    expect((await h.store.batches.get('batch_big', null))?.request_counts_completed).toBe(7)
    const outcome = await h.store.queue.reportFailure({
      jobId: first.shard!.id,
      workerId: 'wrk_1',
      assignmentId: first.assignmentId,
      error: 'boom',
      now: NOW,
    })
    expect(outcome).toMatchObject({ status: 'validated', batch_id: 'batch_big', attempts: 1, error: 'boom' })
    const b = (await h.store.batches.get('batch_big', null))!
    expect(b).toMatchObject({
      status: 'in_progress',
      attempts: 1,
      error: 'boom',
      request_counts_completed: 0,
      request_counts_failed: 0,
    })
    // The stale assignment can no longer write.
    await expect(
      h.store.fleet.recordProgress({
        workerId: 'wrk_1',
        jobId: first.shard!.id,
        assignmentId: first.assignmentId,
        total: undefined,
        completed: 8,
        failed: 1,
        now: NOW,
      }),
    ).rejects.toMatchObject({ status: 403 })
    // Offered again before any new shard: same id, same lines, its attempts kept.
    let again = (await claim(h, 'wrk_3'))!
    expect(again.shard).toMatchObject({
      id: first.shard!.id,
      first_request: 0,
      requests: first.shard!.requests,
      attempts: 1,
    })
    expect(again.assignmentId).not.toBe(first.assignmentId)
    for (let attempt = 2; ; attempt++) {
      const o = await h.store.queue.reportFailure({
        jobId: again.shard!.id,
        workerId: again.shard!.worker_id!,
        assignmentId: again.assignmentId,
        error: `boom ${attempt}`,
        now: NOW,
      })
      expect(o.attempts).toBe(attempt)
      if (o.status === 'failed') break
      again = (await claim(h, 'wrk_3'))!
      expect(again.shard!.id).toBe(first.shard!.id)
    }
    expect(await h.store.batches.get('batch_big', null)).toMatchObject({
      status: 'failed',
      attempts: 3,
      request_counts_failed: TOTAL,
    })
    // The other shard's holder gets 409 and drops the job; nothing is handed out any more.
    await expect(
      h.store.fleet.recordProgress({
        workerId: 'wrk_2',
        jobId: second.shard!.id,
        assignmentId: second.assignmentId,
        total: undefined,
        completed: 1,
        failed: 0,
        now: NOW,
      }),
    ).rejects.toMatchObject({ status: 409 })
    expect(await claim(h, 'wrk_4')).toBeNull()
  })

  test('the sweeper requeues only the silent holder’s shard; re-registration requeues what the worker held', async () => {
    h = await openPg()
    await seed(h)
    const a = (await claim(h, 'wrk_1'))!
    const b = (await claim(h, 'wrk_2'))!
    await h.exec(`UPDATE workers SET last_seen_at = ${CUTOFF} WHERE id = 'wrk_1'`)
    const swept = await h.store.queue.sweep(NOW, CUTOFF)
    expect(swept.requeues).toEqual([
      expect.objectContaining({ batch_id: 'batch_big', status: 'validated', reason: 'worker_silent' }),
    ])
    const shards = await h.store.queue.shardsOf('batch_big')
    expect(shards.map((s) => [s.id, s.status])).toEqual([
      [a.shard!.id, 'waiting'],
      [b.shard!.id, 'running'],
    ])
    expect((await h.store.batches.get('batch_big', null))?.status).toBe('in_progress')
    const reg = await h.store.fleet.register({
      orgId: 'org_a',
      workerId: 'wrk_2',
      machineId: undefined,
      fields: {
        name: 'w2',
        hostname: null,
        daemon_version: null,
        key_id: null,
        max_concurrent_jobs: 1,
        max_download_gb: 0,
        shards: true,
      },
      runtimes: [],
      gpus: [],
      models: [],
      now: NOW,
    })
    expect('requeued' in reg && reg.requeued).toEqual([
      expect.objectContaining({ batch_id: 'batch_big', status: 'validated', error: 'worker re-registered' }),
    ])
    // No shard runs or is done: the batch waits again, validated.
    expect((await h.store.batches.get('batch_big', null))?.status).toBe('validated')
    expect(await h.store.queue.shardTallies(['batch_big'])).toEqual(
      new Map([['batch_big', { total: 2, waiting: 2, running: 0, done: 0 }]]),
    )
  })

  test('lineSpans reads the request-line index: [first, first + count) as one byte range, the last to the end', async () => {
    h = await openPg()
    await seed(h)
    const range = (start: number, end: number | null) => ({ ranges: [{ start, end }], lines: false })
    expect(await h.store.queue.lineSpans('batch_big', 0, 2)).toEqual(range(0, offsets[2]!))
    expect(await h.store.queue.lineSpans('batch_big', 250, 188)).toEqual(range(offsets[250]!, offsets[438]!))
    expect(await h.store.queue.lineSpans('batch_big', TOTAL - 10, 10)).toEqual(
      range(offsets[TOTAL - 10]!, null),
    )
    expect(await h.store.queue.lineSpans('batch_none', 0, 1)).toBeNull()
  })

  test('the heartbeat answers held shards among assigned_job_ids and keeps the reported concurrency', async () => {
    h = await openPg()
    await seed(h)
    await seedSmall(h, 'batch_s1')
    const shard = (await claim(h, 'wrk_1'))!
    const whole = (await claim(h, 'wrk_1'))!
    expect(whole.batch.id).toBe('batch_s1')
    const beat = {
      workerId: 'wrk_1',
      orgId: 'org_a',
      activity: 'busy' as const,
      vram_total_gb: null,
      vram_available_gb: null,
      gpu_utilization: null,
      gpu_memory_used_gb: null,
      uptime_seconds: null,
      loaded_models: [],
      current_job_id: shard.shard!.id,
      now: NOW,
      cutoff: CUTOFF,
    }
    const answer = await h.store.fleet.heartbeat({ ...beat, concurrency: 6 })
    expect(answer?.assigned).toEqual(['batch_s1', shard.shard!.id])
    expect((await h.store.fleet.findWorker('wrk_1'))?.concurrency).toBe(6)
    // Left out: the last reported value stays.
    await h.store.fleet.heartbeat({ ...beat, now: NOW + 1 })
    expect((await h.store.fleet.findWorker('wrk_1'))?.concurrency).toBe(6)
  })
})
