// GET /v1/stats/queue (the dashboard's chart) computed uncached over a large history: 1,000,000
// batches, of which 1,000 wait, 100 run and 2,000 finished within the hour. Printed beside a bare
// baseline on the same data in this run: one raw bun:sqlite statement reading the same rows (the
// least any implementation must read), and a full scan of the table (what the index avoids).
//
//   bun run bench/stats.ts            (1,000,000 batches)
//   bun run bench/stats.ts --quick    (100,000 batches)

import { newId } from '../src/lib/ids'
import { computeQueueStats } from '../src/modules/stats/service'
import { benchServer } from './lib/fixture'
import { fmt, percentile, quick } from './lib/load'

const TOTAL = Number(process.env.BENCH_ROWS ?? (quick ? 100_000 : 1_000_000))
const WAITING = 1_000
const RUNNING = 100
const RECENT = 2_000
const RUNS = 20

const bench = await benchServer()
const { deps, userId } = bench
const now = deps.clock.now()
const insert = deps.sqlite.prepare(
  `insert into batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
     request_counts_total, request_counts_completed, created_at, in_progress_at, completed_at, updated_at)
   values (?, ?, ?, '/v1/chat/completions', '24h', 'm', ?, 10, ?, ?, ?, ?, ?)`,
)
const started = performance.now()
deps.sqlite.transaction(() => {
  for (let i = 0; i < TOTAL; i++) {
    let status = 'completed'
    let created = now - 86_400 * 30 + i
    let claimed: number | null = created + 60
    let done: number | null = created + 600
    if (i < WAITING) [status, created, claimed, done] = ['validated', now - (i % 3600), null, null]
    else if (i < WAITING + RUNNING)
      [status, created, claimed, done] = ['in_progress', now - 3000, now - 1200, null]
    else if (i < WAITING + RUNNING + RECENT)
      [created, claimed, done] = [now - 3500, now - 3000, now - (i % 3600)]
    insert.run(
      newId('batch_'),
      userId,
      newId('file-'),
      status,
      done ? 10 : 0,
      created,
      claimed,
      done,
      created,
    )
  }
})()
console.log(`${fmt(TOTAL)} batches inserted in ${fmt((performance.now() - started) / 1000, 1)} s`)

const since = now - 3600
const bareRead = deps.sqlite.prepare(
  `select status, created_at, in_progress_at, completed_at, request_counts_completed from batches
   where status in ('validating', 'validated', 'in_progress') or completed_at > ?`,
)
const fullScan = deps.sqlite.prepare(
  `select status, created_at, in_progress_at, completed_at, request_counts_completed from batches
   where status in ('validating', 'validated', 'in_progress') or +completed_at > ?`,
)
async function time(fn: () => unknown) {
  const times: number[] = []
  for (let i = 0; i < RUNS; i++) {
    const t = performance.now()
    await fn()
    times.push(performance.now() - t)
  }
  return { p50: percentile(times, 50), p95: percentile(times, 95) }
}
await time(() => computeQueueStats(deps)) // warm the statement cache and the pages
const stats = await time(() => computeQueueStats(deps))
const bare = await time(() => bareRead.all(since))
const scan = await time(() => fullScan.all(since))
const sample = await computeQueueStats(deps)
console.log(
  `queue stats: ${sample.points.length} points, ${sample.validated} waiting, ${sample.in_progress} running, ` +
    `${fmt(sample.points.reduce((n, p) => n + p.requests_completed, 0))} requests done in the hour`,
)
console.log(
  `  computeQueueStats p50 ${fmt(stats.p50, 1)} ms, p95 ${fmt(stats.p95, 1)} ms (served cached for 5 s)`,
)
console.log(`  bare read of the same rows p50 ${fmt(bare.p50, 1)} ms, p95 ${fmt(bare.p95, 1)} ms`)
console.log(`  full table scan (no index) p50 ${fmt(scan.p50, 1)} ms, p95 ${fmt(scan.p95, 1)} ms`)
console.log(
  `  ratio: ${fmt(stats.p50 / bare.p50, 2)}× the bare read; the full scan is ${fmt(scan.p50 / stats.p50, 1)}× slower`,
)
await bench.stop()
