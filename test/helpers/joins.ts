import { expect } from 'bun:test'
import { eq } from 'drizzle-orm'
import type { Job } from '../../src/modules/workers/claim'
import type { Res, TestApp, TestServer } from './app'
import { readBlob, strayBlobs } from './blobs'
import { rowsOf } from './rows'
import {
  batchRow,
  type Fleet,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from './workers'

// docs/api.md §16: a split batch waiting for its last shard's upload, the join that upload runs, and
// what a join leaves: for the join's tests in one process and across instances. A joiner "dies" at
// a step when the call it makes there never returns (nothing after it runs, as in a killed process).

type Target =
  | Pick<TestApp, 'req' | 'deps' | 'clock' | 'config'>
  | Pick<TestServer, 'req' | 'deps' | 'clock' | 'config'>

let n = 0
export interface Split {
  t: Target
  f: Fleet
  batchId: string
  ids: string[]
  /** The last shard's upload (through `on`, else `t`): it brings the batch's last requests, so it joins. */
  uploadLast(on?: Target): Promise<Res>
}

/**
 * A batch of 30 requests split into three shards on three workers, all but the last uploaded; the
 * app's shards are 10 to 100 requests (SHARD_MIN_REQUESTS 10, SHARD_MAX_REQUESTS 100). The clock
 * is then past the sweeper's startup grace.
 */
export async function splitBatch(t: Target): Promise<Split> {
  const f = await makeFleet(t)
  const runtimeId = `join-model:${++n}`
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: runtimeId })
  const ids = Array.from({ length: 30 }, (_, i) => `req-${i + 1}`)
  const batch = await makeValidatedBatch(t.deps, {
    userId: f.user.id,
    model: entry.id,
    customIds: ids,
    indexed: true,
  })
  const workers: string[] = []
  for (const name of ['gpu-a', 'gpu-b', 'gpu-c']) {
    const wid = await registerWorker(t, f.key, { name, models: [runtimeId], capabilities: { shards: true } })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    workers.push(wid)
  }
  const jobs: [string, Job][] = []
  for (const wid of workers) jobs.push([wid, (await poll(t, f.key, wid))!])
  expect(jobs.map(([, j]) => j.shard!.requests)).toEqual([10, 10, 10])
  const send = ([wid, job]: [string, Job], on: Target = t) =>
    upload(
      on,
      f.key,
      { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id },
      ids
        .slice(job.shard!.first_request, job.shard!.first_request + job.shard!.requests)
        .map((id) => okLine(id))
        .join('\n'),
    )
  for (const job of jobs.slice(0, 2)) expect((await send(job)).status).toBe(200)
  t.clock.advance(t.config.HEARTBEAT_TIMEOUT_SECONDS)
  return { t, f, batchId: batch.id, ids, uploadLast: (on) => send(jobs[2]!, on) }
}

/**
 * `obj[name]`'s next call (one `when` accepts) stops there: it waits for `go` (never, by default:
 * the process died at that step); the method is itself again for every other call. Resolves when
 * that call is made.
 */
export function stopAt<T extends object, K extends keyof T>(
  obj: T,
  name: K,
  go: Promise<void> = new Promise(() => {}),
  when: (...args: never[]) => boolean = () => true,
) {
  const original = obj[name] as (...args: unknown[]) => unknown
  const reached = Promise.withResolvers<void>()
  obj[name] = ((...args: never[]) => {
    if (!when(...args)) return original.apply(obj, args)
    obj[name] = original as T[K]
    reached.resolve()
    return go.then(() => original.apply(obj, args))
  }) as T[K]
  return reached.promise
}

/**
 * The batch completed once: its output holds every request exactly once, its files are its only
 * ones, nothing but recorded files is stored (no part, no file of a losing or dead joiner, no
 * `.part`), and no join lease is left.
 */
export async function joinedOnce(s: Split) {
  const batch = await batchRow(s.t.deps, s.batchId)
  expect(batch).toMatchObject({ status: 'completed', request_counts_completed: 30, request_counts_failed: 0 })
  expect(batch.error_file_id).toBeNull()
  const output = (await readBlob(s.t.deps, batch.output_file_id!))!.split('\n').filter(Boolean)
  expect(output).toEqual(s.ids.map((id) => okLine(id)))
  const { db, tables } = rowsOf(s.t.deps)
  const files = await db.select().from(tables.files).where(eq(tables.files.batch_id, s.batchId))
  expect(files.map((f) => f.id)).toEqual([batch.output_file_id!])
  expect(await strayBlobs(s.t.deps)).toEqual([])
  expect(await db.select().from(tables.batchJoins).where(eq(tables.batchJoins.batch_id, s.batchId))).toEqual(
    [],
  )
}
