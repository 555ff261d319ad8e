// Poll: (1) 64 concurrent simulated workers drain 10,000 validated batches over HTTP — claims/s
// and double claims (must be 0); (2) p50 latency of one poll with 100,000 batches queued vs 100
// (target: within 2×, the claim is index-backed). Both sides are measured in this run.
//
//   bun run bench/poll.ts            (10,000 drained; 100,000 vs 100 queued)
//   bun run bench/poll.ts --quick    (2,000 drained; 20,000 vs 100 queued)

import { batchAssignments } from '../src/db/schema'
import { addEntry, addValidatedBatches, benchServer, post } from './lib/fixture'
import { fmt, percentile, quick } from './lib/load'

const WORKERS = 64
const DRAIN = quick ? 2_000 : 10_000
const BIG = quick ? 20_000 : 100_000
const SMALL = 100
const SAMPLES = 60

// ---- (1) the drain ----------------------------------------------------------------------------
{
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
  const seen = new Map<string, number>()
  const t0 = performance.now()
  await Promise.all(
    ids.map(async (worker_id) => {
      for (;;) {
        const { job } = await post(`${gk.url}/workers/poll`, gk.key, { worker_id })
        if (!job) return
        seen.set(job.job_id, (seen.get(job.job_id) ?? 0) + 1)
      }
    }),
  )
  const seconds = (performance.now() - t0) / 1000
  const doubles = [...seen.values()].filter((n) => n > 1).length
  const assignments = await gk.deps.db.$count(batchAssignments)
  console.log(`drain: ${WORKERS} workers, ${fmt(DRAIN)} batches`)
  console.log(
    `  claimed ${fmt(seen.size)} distinct (${fmt(assignments)} assignments), double claims: ${doubles}`,
  )
  console.log(`  ${fmt(seen.size / seconds)} claims/s over HTTP (${fmt(seconds, 2)} s)`)
  await gk.stop()
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
  const { worker_id } = await post(`${gk.url}/workers/register`, gk.key, {
    name: 'lat',
    models: ['lat:8b'],
    max_concurrent_jobs: SAMPLES * 2,
    runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
  })
  const times: number[] = []
  for (let i = 0; i < SAMPLES * 2; i++) {
    const t0 = performance.now()
    const { job } = await post(`${gk.url}/workers/poll`, gk.key, { worker_id })
    if (!job) throw new Error('no job')
    if (i >= SAMPLES) times.push(performance.now() - t0) // the first half warms up
  }
  await gk.stop()
  return percentile(times, 50)
}

const small = await p50At(SMALL)
const big = await p50At(BIG)
console.log(`poll p50 with ${fmt(SMALL)} queued: ${fmt(small * 1000)} µs`)
console.log(`poll p50 with ${fmt(BIG)} queued: ${fmt(big * 1000)} µs`)
console.log(`ratio: ${fmt(big / small, 2)}× (target ≤ 2×)`)
process.exit(0)
