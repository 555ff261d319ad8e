// Usage (docs/api.md §14): the p50 of one caller's 30-day usage query (per UTC day, and per model for
// the org view) when the installation holds few other batches vs very many. The caller's own
// work is the same in both; the queries are index range probes (batches (user_id, completed_at),
// batch_assignments (org_id, completed_at)), so the ratio should stay near 1 (target: within 2×).
// Both sides are measured in this run, on SQLite.
//
//   bun run bench/usage.ts           (1,000 caller batches; 1,000 vs 300,000 other batches)
//   bun run bench/usage.ts --quick   (1,000 caller batches; 1,000 vs 30,000 other batches)

import { DAY, type UsageGroup, type UsageScope } from '../src/store/usage'
import { type Bench, benchServer } from './lib/fixture'
import { fmt, percentile, quick } from './lib/load'

const MINE = 1_000
const FEW = 1_000
const MANY = quick ? 30_000 : 300_000
const SAMPLES = 200

/** `count` completed batches of `userId` spread over the 30 days before now, run by `orgId`. */
function addCompleted(gk: Bench, userId: string, orgId: string, count: number) {
  const now = gk.deps.clock.now()
  const { sqlite } = gk.deps
  const batch = sqlite.prepare(
    `insert into batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
       request_counts_total, request_counts_completed, usage, created_at, completed_at, updated_at)
     values (?, ?, 'file-x', '/v1/chat/completions', '24h', ?, 'completed', 10, 10, ?, ?, ?, ?)`,
  )
  const assignment = sqlite.prepare(
    `insert into batch_assignments (id, batch_id, worker_id, org_id, assigned_at, completed_at)
     values (?, ?, 'wrk_bench', ?, ?, ?)`,
  )
  const usage = JSON.stringify({ prompt_tokens: 100, completion_tokens: 50, total_tokens: 150 })
  sqlite.transaction(() => {
    for (let i = 0; i < count; i++) {
      const id = `batch_${userId}_${i}`
      const at = now - Math.floor((i / count) * 30 * DAY)
      batch.run(id, userId, `model-${i % 5}`, usage, at, at, at)
      assignment.run(`asg_${userId}_${i}`, id, orgId, at, at)
    }
  })()
}

/**
 * p50 of one query on each installation, their samples interleaved (small, big, small, …) so that
 * whatever else the machine does weighs on both alike; the first quarter warms up.
 */
async function p50s(pairs: [Bench, UsageScope][], groupBy: UsageGroup) {
  const times = pairs.map(() => [] as number[])
  for (let i = 0; i < SAMPLES * 1.25; i++) {
    for (const [n, [gk, scope]] of pairs.entries()) {
      const end = gk.deps.clock.now() + 1
      const t0 = performance.now()
      const rows = await gk.deps.store.usage.sums(scope, { start: end - 30 * DAY, end }, groupBy)
      if (i >= SAMPLES / 4) times[n]!.push(performance.now() - t0)
      if (rows.length === 0) throw new Error('no usage: the fixture is wrong')
    }
  }
  return times.map((t) => percentile(t, 50))
}

/** A server whose installation holds the caller's batches and `others` batches of other users. */
async function installation(others: number) {
  const gk = await benchServer({ LOG_LEVEL: 'warn' })
  addCompleted(gk, gk.userId, gk.orgId, MINE)
  // The rest of the installation: other users' work, run by another organization's workers.
  const sqlite = gk.deps.sqlite
  const users = Math.max(1, Math.floor(others / 1_000))
  for (let u = 0; u < users; u++) {
    sqlite.run(
      `insert into users (id, email, password_hash, full_name, created_at, updated_at) values (?, ?, 'h', 'O', 1, 1)`,
      [`user_o${u}`, `o${u}@example.test`],
    )
    addCompleted(gk, `user_o${u}`, 'org_others', Math.floor(others / users))
  }
  sqlite.run('ANALYZE')
  return gk
}

const small = await installation(FEW)
const big = await installation(MANY)
const user = (gk: Bench): [Bench, UsageScope] => [gk, { kind: 'user', userId: gk.userId }]
const org = (gk: Bench): [Bench, UsageScope] => [gk, { kind: 'org', orgId: gk.orgId }]
const [userFew, userMany] = await p50s([user(small), user(big)], 'day')
const [orgFew, orgMany] = await p50s([org(small), org(big)], 'model')
const few = { user: userFew!, org: orgFew! }
const many = { user: userMany!, org: orgMany! }
await small.stop()
await big.stop()
console.log(`usage store query p50, the caller's ${fmt(MINE)} completed batches over 30 days (SQLite):`)
for (const [name, label] of [
  ['user', 'GET /v1/usage per day        '],
  ['org', 'GET /v1/orgs/{id}/usage model'],
] as const) {
  console.log(
    `  ${label}  ${fmt(few[name], 3)} ms with ${fmt(FEW)} other batches, ` +
      `${fmt(many[name], 3)} ms with ${fmt(MANY)}: ratio ${fmt(many[name] / few[name], 2)}× (target ≤ 2×)`,
  )
}
