// The rate limiter under a client cycling keys (forgot-password with a new email each time, 5 an
// hour): nanoseconds per take() and heap growth, with the table filling, full, and churning as keys
// expire. Printed beside a bare baseline measured in this run (a Map set and delete of the same
// keys), and beside the limiter as it was (one Map pruned by a full scan, unbounded).
//
//   bun run bench/rate-limit.ts            (1,000,000 takes, 100,000 keys a rule)
//   bun run bench/rate-limit.ts --quick    (200,000 takes)

import { manualClock } from '../src/lib/clock'
import { RateLimiter } from '../src/lib/rate-limit'
import { fmt, quick } from './lib/load'

const TAKES = quick ? 200_000 : 1_000_000
const emails = Array.from({ length: TAKES }, (_, i) => `cycle-${i}@example.test`)

/** The limiter as it was: one Map of hit lists, pruned by a full scan once it holds 10,000 keys. */
class ScanningLimiter {
  private buckets = new Map<string, { windowMs: number; hits: number[] }>()
  constructor(private clock: { nowMs(): number }) {}
  take(key: string, limit: number, windowSeconds: number): void {
    const now = this.clock.nowMs()
    const windowMs = windowSeconds * 1000
    const bucket = this.buckets.get(key) ?? { windowMs, hits: [] }
    bucket.hits = bucket.hits.filter((t) => t > now - windowMs)
    this.buckets.set(key, bucket)
    if (bucket.hits.length >= limit) throw new Error('429')
    bucket.hits.push(now)
    if (this.buckets.size > 10_000) {
      for (const [k, b] of this.buckets)
        if (b.hits.every((t) => t <= now - b.windowMs)) this.buckets.delete(k)
    }
  }
}

function heapMb(): number {
  Bun.gc(true)
  return process.memoryUsage().heapUsed / 1024 / 1024
}

/** ns per call of `take(i)` over TAKES calls, the clock advancing `stepMs` between calls. */
function run(
  label: string,
  stepMs: number,
  take: (i: number) => void,
  clock: ReturnType<typeof manualClock>,
) {
  const before = heapMb()
  const started = performance.now()
  for (let i = 0; i < TAKES; i++) {
    try {
      take(i)
    } catch {}
    clock.advance(stepMs / 1000)
  }
  const ns = ((performance.now() - started) * 1e6) / TAKES
  return { label, ns, heap: heapMb() - before }
}

// Two arrival rates against a one-hour window: fast enough to fill the table and stay full
// (10,000/s), and slow enough that keys expire as fast as new ones come (25/s, under the bound).
for (const [scenario, stepMs] of [
  ['flood, table full', 0.1],
  ['steady churn, keys expiring', 40],
] as const) {
  const bareClock = manualClock()
  const bare = new Map<string, number>()
  const bound = 100_000
  const baseline = run(
    'bare Map set + delete',
    stepMs,
    (i) => {
      bare.set(emails[i]!, bareClock.nowMs())
      if (i >= bound) bare.delete(emails[i - bound]!)
    },
    bareClock,
  )
  const clock = manualClock()
  const limiter = new RateLimiter(clock)
  const now = run('RateLimiter', stepMs, (i) => limiter.take('forgot', emails[i]!, 5, 3600), clock)
  const tracked = limiter.trackedKeys()
  const oldClock = manualClock()
  const old = new ScanningLimiter(oldClock)
  // The scanning limiter is quadratic once full; it gets a tenth of the takes.
  const oldTakes = Math.min(TAKES, 20_000)
  const oldStarted = performance.now()
  for (let i = 0; i < oldTakes; i++) {
    old.take(emails[i]!, 5, 3600)
    oldClock.advance(stepMs / 1000)
  }
  const oldNs = ((performance.now() - oldStarted) * 1e6) / oldTakes
  console.log(`\n${scenario}: ${fmt(TAKES)} takes, a new email each, 5/hour, one take every ${stepMs} ms`)
  console.log(`  bare baseline      ${fmt(baseline.ns, 0)} ns/take   heap +${fmt(baseline.heap, 1)} MB`)
  console.log(
    `  RateLimiter        ${fmt(now.ns, 0)} ns/take   heap +${fmt(now.heap, 1)} MB   keys tracked ${fmt(tracked)}` +
      `   ${fmt(now.ns / baseline.ns, 2)}× bare`,
  )
  console.log(
    `  as it was (scan)   ${fmt(oldNs, 0)} ns/take over the first ${fmt(oldTakes)} takes   ${fmt(oldNs / baseline.ns, 1)}× bare`,
  )
}
