// Fair share (docs/api.md §14): p50 latency of one poll, through HTTP (auth, matching, the claim with
// its per-owner heads and counts), at three queues of one model, measured in the same run:
//   100 users × 100 batches (10,000 queued, 100 owners waiting),
//   100 users × 1–2 batches (~100 queued, 100 owners: the same owners, a shallow queue),
//   1 user × 100 batches (100 queued, one owner).
// Target: the deep queue within 2× the shallow one with the same owners (the cost follows the
// owners waiting, never the depth). The one-owner figure shows what 100 owners cost.
//
//   bun run bench/fair-share.ts              (SQLite)
//   bun run bench/fair-share.ts --postgres   (PostgreSQL: a throwaway cluster, scripts/postgres.ts)

import { SQL } from 'bun'
import { freshPostgresUrl } from '../test/helpers/postgres'
import { addEntry, benchServer, pollTimes } from './lib/fixture'
import { fmt, percentile } from './lib/load'

const postgres = process.argv.includes('--postgres')
const SAMPLES = 60
const MODEL = 'fair-8b-q4km'

async function p50At(users: number, perUser: number) {
  const url = postgres ? await freshPostgresUrl() : undefined
  const gk = await benchServer({ LOG_LEVEL: 'warn', ...(url ? { DATABASE_URL: url } : {}) })
  const pg = url ? new SQL({ url, max: 1 }) : undefined
  const exec = (text: string) => (pg ? pg.unsafe(text) : gk.deps.sqlite.exec(text))
  if (pg) {
    await pg`INSERT INTO catalog_entries (id, display_name, runtime, runtime_model_id, vram_gb, size_gb,
        parameter_size, task_type, created_at, updated_at)
      VALUES (${MODEL}, ${MODEL}, 'ollama', 'fair:8b', 8, 5, '8B', 'chat', 1, 1)`
  } else addEntry(gk.deps, MODEL, 'fair:8b')
  // Users, then their batches interleaved in time (round after round), in set-based statements.
  const series = (n: number) =>
    pg
      ? `generate_series(1, ${n}) AS g(n)`
      : `(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ${n}) SELECT n FROM s) AS g`
  await exec(`INSERT INTO users (id, email, password_hash, full_name, created_at, updated_at)
    SELECT 'user_f' || g.n, 'f' || g.n || '@example.test', 'h', 'F', 1, 1 FROM ${series(users)}`)
  await exec(`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, created_at, updated_at)
    SELECT 'batch_f' || r.n || '_' || u.n, 'user_f' || u.n, 'file-f', '/v1/chat/completions', '24h',
      '${MODEL}', 'validated', 1, 1, 1
    FROM ${series(perUser).replace(' g', ' r')} CROSS JOIN ${series(users).replace(' g', ' u')}
    ORDER BY r.n, u.n`)
  await exec(pg ? 'ANALYZE batches' : 'ANALYZE')
  const times = await pollTimes(gk, 'fair', 'fair:8b', SAMPLES)
  await pg?.close()
  await gk.stop()
  return percentile(times, 50)
}

const deep = await p50At(100, 100)
// 200 at the start, ~80 at the end of the 120 polls, every user still waiting for most of them.
const shallow = await p50At(100, 2)
const oneOwner = await p50At(1, 100 + SAMPLES * 2)
console.log(`fair share, ${postgres ? 'PostgreSQL' : 'SQLite'}: poll p50 through HTTP`)
console.log(`  100 users × 100 batches (10,000 queued): ${fmt(deep * 1000)} µs`)
console.log(`  100 users × 1–2 batches (~100 queued):   ${fmt(shallow * 1000)} µs`)
console.log(`  1 user × 100 batches:                    ${fmt(oneOwner * 1000)} µs`)
console.log(`  ratio deep / shallow, same owners: ${fmt(deep / shallow, 2)}× (target ≤ 2×)`)
console.log(`  ratio deep / one owner:            ${fmt(deep / oneOwner, 2)}×`)
process.exit(0)
