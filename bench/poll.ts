// Poll: (1) 64 concurrent simulated workers drain 10,000 validated batches over HTTP — claims/s
// and double claims (must be 0) — vs a bare baseline in the same run: an Elysia route with the same
// TypeBox body that claims with one BEGIN IMMEDIATE transaction on bun:sqlite (the oldest validated
// batch of the model, UPDATE, INSERT the assignment) on a database of the same schema (target
// ≥ 50 %); the pollers run in their own thread for both. Beside it, the CPU time the server's thread
// spent per claim, each side's own: on a loaded machine the throughput of both sides moves with what
// else runs, the CPU each claim costs much less. (2) p50 latency of one poll with 100,000 batches
// queued vs 100 (target: within 2×, the claim is index-backed).
//
//   bun run bench/poll.ts            (10,000 drained; 100,000 vs 100 queued)
//   bun run bench/poll.ts --quick    (2,000 drained; 20,000 vs 100 queued)

import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Elysia } from 'elysia'
import { migrate } from '../src/db/migrate'
import { openDb } from '../src/db/open'
import { batchAssignments } from '../src/db/schema'
import { newId } from '../src/lib/ids'
import { WorkerBodies as WorkerModel } from '../src/protocol/worker'
import { addEntry, addValidatedBatches, benchServer, pollTimes, post } from './lib/fixture'
import { drain, fmt, mainThreadCpuMicros, percentile, quick } from './lib/load'

const WORKERS = 64
const DRAIN = quick ? 2_000 : 10_000
const BIG = quick ? 20_000 : 100_000
const SMALL = 100
const SAMPLES = 60

/** The server thread's CPU time since `from` (µs), where /proc tells it. */
const cpuSince = (from: number | undefined) => {
  const to = mainThreadCpuMicros()
  return from === undefined || to === undefined ? undefined : to - from
}

const pollersFor = (key: string | null, ids: string[]) =>
  ids.map((worker_id) => ({
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ worker_id }),
  }))

// ---- (1a) the drain through gridkeep -----------------------------------------------------------
const gridkeep = await (async () => {
  const gk = await benchServer({ LOG_LEVEL: 'warn' })
  addEntry(gk.deps, 'drain-8b-q4km', 'drain:8b')
  addValidatedBatches(gk.deps, gk.userId, 'drain-8b-q4km', DRAIN)
  const ids: string[] = []
  for (let i = 0; i < WORKERS; i++) {
    const reg = await post(`${gk.url}/workers/register`, gk.key, {
      name: `w${i}`,
      models: ['drain:8b'],
      max_concurrent_jobs: 1024,
      runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
    })
    ids.push(reg.worker_id)
  }
  const cpu = mainThreadCpuMicros()
  const { jobIds, seconds } = await drain(`${gk.url}/workers/poll`, pollersFor(gk.key, ids))
  const cpuMicros = cpuSince(cpu)
  const assignments = await gk.deps.db.$count(batchAssignments)
  await gk.stop()
  return { jobIds, seconds, assignments, cpuMicros }
})()

// ---- (1b) the bare baseline: the claim and nothing else ------------------------------------------
const bare = await (async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-bare-'))
  const { db, sqlite } = openDb({ path: join(dir, 'bare.db') })
  migrate(db)
  // The cheapest head probe there is: one model, oldest first, nothing else in the key.
  sqlite.exec('CREATE INDEX bare_head ON batches (status, model, seq)')
  sqlite.exec(`INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
    VALUES ('user_bare', 'bare@example.test', 'h', 'Bare', 1, 1)`)
  const insert = sqlite.prepare(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window,
      model, status, request_counts_total, created_at, updated_at)
    VALUES (?, 'user_bare', ?, '/v1/chat/completions', '24h', 'drain-8b-q4km', 'validated', 1, 1, 1)`)
  sqlite.transaction(() => {
    for (let i = 0; i < DRAIN; i++) insert.run(newId('batch_'), newId('file-'))
  })()
  const head =
    sqlite.prepare(`SELECT id FROM batches INDEXED BY bare_head WHERE status = 'validated' AND model = ?
    ORDER BY seq LIMIT 1`)
  const claim = sqlite.prepare(`UPDATE batches SET status = 'in_progress', in_progress_at = ?, updated_at = ?
    WHERE id = ? AND status = 'validated'`)
  const assign = sqlite.prepare(`INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at)
    VALUES (?, ?, ?, 'org_bare', ?)`)
  const claimTx = sqlite.transaction((workerId: string) => {
    const b = head.get('drain-8b-q4km') as { id: string } | null
    if (!b) return null
    const now = Math.floor(Date.now() / 1000)
    claim.run(now, now, b.id)
    assign.run(newId('asg_'), b.id, workerId, now)
    return b.id
  })
  const app = new Elysia()
    .post(
      '/workers/poll',
      ({ body }) => {
        const id = claimTx.immediate(body.worker_id)
        return { job: id ? { job_id: id } : null }
      },
      { body: WorkerModel.poll },
    )
    .listen({ port: 0, hostname: '127.0.0.1' })
  const ids = Array.from({ length: WORKERS }, (_, i) => `w${i}`)
  const cpu = mainThreadCpuMicros()
  const { jobIds, seconds } = await drain(
    `http://127.0.0.1:${app.server!.port}/workers/poll`,
    pollersFor(null, ids),
  )
  const cpuMicros = cpuSince(cpu)
  await app.stop()
  sqlite.close()
  rmSync(dir, { recursive: true, force: true })
  return { jobIds, seconds, cpuMicros }
})()

const distinct = new Set(gridkeep.jobIds).size
const gkRate = distinct / gridkeep.seconds
const bareRate = bare.jobIds.length / bare.seconds
console.log(`drain: ${WORKERS} workers (pollers in their own thread), ${fmt(DRAIN)} batches`)
console.log(
  `  claimed ${fmt(distinct)} distinct (${fmt(gridkeep.assignments)} assignments), double claims: ` +
    `${gridkeep.jobIds.length - distinct}`,
)
console.log(`  gridkeep: ${fmt(gkRate)} claims/s over HTTP (${fmt(gridkeep.seconds, 2)} s)`)
console.log(
  `  bare Elysia + TypeBox + one BEGIN IMMEDIATE claim: ${fmt(bareRate)} claims/s (${fmt(bare.seconds, 2)} s)`,
)
console.log(`  ratio: ${fmt((100 * gkRate) / bareRate)} % (target ≥ 50 %)`)
if (gridkeep.cpuMicros !== undefined && bare.cpuMicros !== undefined) {
  const gkCpu = gridkeep.cpuMicros / distinct
  const bareCpu = bare.cpuMicros / bare.jobIds.length
  console.log(
    `  server CPU per claim: gridkeep ${fmt(gkCpu)} µs, bare ${fmt(bareCpu)} µs ` +
      `(bare ÷ gridkeep ${fmt((100 * bareCpu) / gkCpu)} %)`,
  )
}

// ---- (2) latency vs queue depth -----------------------------------------------------------------
// One server per queue depth; polls are sequential HTTP requests through the whole app (auth,
// validation, matching, claim); the first SAMPLES warm up, the next SAMPLES are measured.
async function p50At(queued: number) {
  const gk = await benchServer({ LOG_LEVEL: 'warn' })
  // Some other models queued too: the probe must not scan them.
  addEntry(gk.deps, 'lat-8b-q4km', 'lat:8b')
  addEntry(gk.deps, 'other-8b-q4km', 'other:8b')
  addValidatedBatches(gk.deps, gk.userId, 'other-8b-q4km', queued)
  // Topped up by the polls taken, so the depth stays at `queued` (+/- the samples).
  addValidatedBatches(gk.deps, gk.userId, 'lat-8b-q4km', queued + SAMPLES)
  const times = await pollTimes(gk, 'lat', 'lat:8b', SAMPLES)
  await gk.stop()
  return percentile(times, 50)
}

const small = await p50At(SMALL)
const big = await p50At(BIG)
console.log(`poll p50 with ${fmt(SMALL)} queued: ${fmt(small * 1000)} µs`)
console.log(`poll p50 with ${fmt(BIG)} queued: ${fmt(big * 1000)} µs`)
console.log(`ratio: ${fmt(big / small, 2)}× (target ≤ 2×)`)
process.exit(0)
