import { afterAll, beforeAll, expect, test } from 'bun:test'
import { startTestServer, type TestServer } from '../helpers/app'
import { rowsOf } from '../helpers/rows'
import {
  type Fleet,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §7 / docs/api.md §7: "two pollers never get the same batch" — over a real listening server.

const POLLERS = 32
const BATCHES = 500

let s: TestServer
let f: Fleet
let batchIds: string[]
beforeAll(async () => {
  s = await startTestServer()
  f = await makeFleet(s)
  const entry = await makeCatalogEntry(s.deps, { runtime_model_id: 'storm:1' })
  batchIds = []
  // In groups: on the S3 engine (bun run test:s3) each input file is an object written over HTTP.
  for (let i = 0; i < BATCHES; i += 25) {
    const group = Array.from({ length: Math.min(25, BATCHES - i) }, () =>
      makeValidatedBatch(s.deps, { userId: f.user.id, model: entry.id, requests: 1 }),
    )
    for (const batch of await Promise.all(group)) batchIds.push(batch.id)
  }
  // Explicit: Bun 1.4.5 applies the preload's setDefaultTimeout to the first test file only.
}, 60_000)
afterAll(() => s.stop())

test(`${POLLERS} concurrent pollers drain ${BATCHES} batches; every batch is claimed exactly once`, async () => {
  const workerIds = await Promise.all(
    Array.from({ length: POLLERS }, () =>
      registerWorker(s, f.key, { models: ['storm:1'], max_concurrent_jobs: 1024 }),
    ),
  )
  const claimedBy = await Promise.all(
    workerIds.map(async (wid) => {
      const mine: string[] = []
      for (;;) {
        const res = await fetch(`${s.url}/workers/poll`, {
          method: 'POST',
          headers: { authorization: `Bearer ${f.key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ worker_id: wid }),
        })
        expect(res.status).toBe(200)
        const { job } = (await res.json()) as { job: { job_id: string } | null }
        if (!job) return { wid, mine }
        mine.push(job.job_id)
      }
    }),
  )
  const all = claimedBy.flatMap((c) => c.mine)
  expect(all.length).toBe(BATCHES)
  expect(new Set(all).size).toBe(BATCHES)
  expect([...all].sort()).toEqual([...batchIds].sort())
  // More than one poller took part (the storm really was concurrent).
  expect(claimedBy.filter((c) => c.mine.length > 0).length).toBeGreaterThan(1)

  const { db, tables } = rowsOf(s.deps)
  const rows = await db
    .select({ batch_id: tables.batchAssignments.batch_id, worker_id: tables.batchAssignments.worker_id })
    .from(tables.batchAssignments)
  expect(rows.length).toBe(BATCHES)
  const holder = new Map(rows.map((r) => [r.batch_id, r.worker_id]))
  for (const c of claimedBy) for (const id of c.mine) expect(holder.get(id)).toBe(c.wid)
  const statuses = new Set(
    (await db.select({ status: tables.batches.status }).from(tables.batches)).map((b) => b.status),
  )
  expect([...statuses]).toEqual(['in_progress'])
}, 60_000)

// docs/api.md §16: a request line is never in two held shards, however many shard-capable pollers cut
// the same batches at once; once all is cut, each shard gets at most one backup copy.
test(`${POLLERS} concurrent shard pollers cut 20 large batches: every request in exactly one shard`, async () => {
  const t = await startTestServer({ SHARD_MIN_REQUESTS: '5', SHARD_MAX_REQUESTS: '40' })
  try {
    const fleet = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'storm:2' })
    const batches = await Promise.all(
      Array.from({ length: 20 }, () =>
        makeValidatedBatch(t.deps, { userId: fleet.user.id, model: entry.id, requests: 150, indexed: true }),
      ),
    )
    const workerIds = await Promise.all(
      Array.from({ length: POLLERS }, () =>
        registerWorker(t, fleet.key, {
          models: ['storm:2'],
          max_concurrent_jobs: 1024,
          capabilities: { shards: true },
        }),
      ),
    )
    const copies: string[] = []
    const jobs = (
      await Promise.all(
        workerIds.map(async (wid) => {
          const mine: {
            job_id: string
            batch_id: string
            backup?: true
            shard: { first_request: number; requests: number }
          }[] = []
          for (;;) {
            const res = await fetch(`${t.url}/workers/poll`, {
              method: 'POST',
              headers: { authorization: `Bearer ${fleet.key}`, 'content-type': 'application/json' },
              body: JSON.stringify({ worker_id: wid }),
            })
            expect(res.status).toBe(200)
            const { job } = (await res.json()) as { job: (typeof mine)[number] | null }
            if (!job) return mine
            if (job.backup) copies.push(job.job_id)
            else mine.push(job)
          }
        }),
      )
    ).flat()
    for (const batch of batches) {
      const covered = new Uint8Array(150)
      for (const j of jobs.filter((x) => x.batch_id === batch.id)) {
        for (let i = j.shard.first_request; i < j.shard.first_request + j.shard.requests; i++) covered[i]!++
      }
      expect([...covered].every((c) => c === 1)).toBe(true)
    }
    // Every shard was backed up by some other poller, exactly once.
    expect(copies.sort()).toEqual(jobs.map((j) => j.job_id).sort())
  } finally {
    await t.stop()
  }
}, 60_000)
