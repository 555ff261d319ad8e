// Heartbeat throughput at concurrency 64: gridkeep's POST /workers/{id}/heartbeat (auth, ownership,
// worker update, inventory check, assigned jobs) against a bare Elysia route that validates the
// same ~1 KB body with the same TypeBox schema and runs one UPDATE on the same engine. Target: ≥ 65 %.
//
//   bun run bench/heartbeat.ts            (6 paired rounds of 2.5 s per side)
//   bun run bench/heartbeat.ts --quick    (3 paired rounds of 1 s per side)
//   bun run bench/heartbeat.ts --postgres (both on a throwaway PostgreSQL cluster, or on
//                                          DATABASE_URL: the baseline's UPDATE goes to PostgreSQL too)

import { Database } from 'bun:sqlite'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SQL } from 'bun'
import { Elysia } from 'elysia'
import { type HeartbeatBody, WorkerBodies as WorkerModel } from '../src/protocol/worker'
import { freshPostgresUrl } from '../test/helpers/postgres'
import { benchServer, post } from './lib/fixture'
import { fmt, load, quick } from './lib/load'

const CONCURRENCY = 64
const DURATION_MS = quick ? 2000 : 5000
const sha = (s: string) => new Bun.CryptoHasher('sha256').update(s).digest('hex')

const body = {
  activity: 'idle',
  current_job_id: null,
  gpu_utilization: 12.5,
  gpu_memory_used_gb: 5.25,
  vram_total_gb: 24,
  vram_available_gb: 18.75,
  loaded_models: ['llama3.1:8b-instruct-q4_K_M'],
  inventory: [
    'llama3.1:8b-instruct-q4_K_M',
    'qwen2.5:7b-instruct-q4_K_M',
    'mistral:7b-instruct-q4_K_M',
    'gemma2:9b',
  ].map((n, i) => ({
    local_name: n,
    sha256: sha(n),
    size_bytes: 4_900_000_000 + i,
    loaded: i === 0,
    runtime: 'ollama',
  })),
  uptime_seconds: 123456,
}
const text = JSON.stringify(body)

// The bare baseline: same validation, one UPDATE on the same engine, nothing else.
const postgres = process.argv.includes('--postgres') ? await freshPostgresUrl() : process.env.DATABASE_URL
const ids = Array.from({ length: CONCURRENCY }, (_, i) => `w${i}`)
const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-bare-'))
const sqlite = new Database(join(dir, 'bare.db'), { create: true, strict: true })
// On PostgreSQL: a pool as large as gridkeep's default (DATABASE_POOL_SIZE 20) on the same cluster.
const pg = postgres ? new SQL({ url: postgres, max: 20 }) : undefined
const columns = `id text primary key, activity text, vram_total_gb real, vram_available_gb real,
  gpu_utilization real, loaded_models text, last_seen_at bigint`
let write: (id: string, b: HeartbeatBody) => unknown
if (pg) {
  await pg.unsafe(`create table bare_workers (${columns})`)
  for (const id of ids) await pg`insert into bare_workers (id) values (${id})`
  write = (id, b) =>
    pg`update bare_workers set activity = ${b.activity}, vram_total_gb = ${b.vram_total_gb ?? null},
      vram_available_gb = ${b.vram_available_gb ?? null}, gpu_utilization = ${b.gpu_utilization ?? null},
      loaded_models = ${JSON.stringify(b.loaded_models ?? [])}, last_seen_at = ${Math.floor(Date.now() / 1000)}
      where id = ${id}`
} else {
  sqlite.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000')
  sqlite.exec(`create table workers (${columns})`)
  for (const id of ids) sqlite.query('insert into workers (id) values (?)').run(id)
  const update = sqlite.prepare(
    `update workers set activity = ?, vram_total_gb = ?, vram_available_gb = ?, gpu_utilization = ?,
     loaded_models = ?, last_seen_at = ? where id = ?`,
  )
  write = (id, b) =>
    update.run(
      b.activity,
      b.vram_total_gb ?? null,
      b.vram_available_gb ?? null,
      b.gpu_utilization ?? null,
      JSON.stringify(b.loaded_models ?? []),
      Math.floor(Date.now() / 1000),
      id,
    )
}
const bare = new Elysia()
  .post(
    '/workers/:worker_id/heartbeat',
    pg
      ? async ({ params, body: b }) => {
          await write(params.worker_id, b)
          return { status: 'online' }
        }
      : ({ params, body: b }) => {
          write(params.worker_id, b)
          return { status: 'online' }
        },
    { params: WorkerModel.params, body: WorkerModel.heartbeat },
  )
  .listen({ port: 0, hostname: '127.0.0.1' })
const bareUrl = `http://127.0.0.1:${bare.server!.port}`

const gk = await benchServer({
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
  ...(postgres ? { DATABASE_URL: postgres } : {}),
})
const workers: string[] = []
for (let i = 0; i < CONCURRENCY; i++) {
  const reg = await post(`${gk.url}/workers/register`, gk.key, {
    name: `bench-${i}`,
    runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
  })
  workers.push(reg.worker_id)
}

const requestsFor = (base: string, list: string[], auth?: string) =>
  list.map((id) => ({
    url: `${base}/workers/${id}/heartbeat`,
    headers: { 'content-type': 'application/json', ...(auth ? { authorization: `Bearer ${auth}` } : {}) },
    body: text,
  }))

console.log(
  `${postgres ? 'PostgreSQL' : 'SQLite'}, heartbeat body ${text.length} bytes, concurrency ${CONCURRENCY}, ${DURATION_MS / 1000} s per side`,
)
// Warm both up, then measure them in alternating pairs (bare, gridkeep) so both sides see the same
// machine state; the figure is the median of the pairs' ratios (best-of on this noisy 2-core
// machine swung by ±3 points between runs), with the range.
await load(requestsFor(bareUrl, ids), CONCURRENCY, 500)
await load(requestsFor(gk.url, workers, gk.key), CONCURRENCY, 500)
const ROUNDS = quick ? 3 : 6
const pairs: { bare: number; gridkeep: number; ratio: number }[] = []
let errors = 0
for (let round = 0; round < ROUNDS; round++) {
  const b = await load(requestsFor(bareUrl, ids), CONCURRENCY, DURATION_MS / 2)
  const g = await load(requestsFor(gk.url, workers, gk.key), CONCURRENCY, DURATION_MS / 2)
  pairs.push({ bare: b.perSecond, gridkeep: g.perSecond, ratio: g.perSecond / b.perSecond })
  errors += b.errors + g.errors
}
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}
const ratios = pairs.map((p) => p.ratio)
console.log(
  `bare Elysia + TypeBox + 1 UPDATE : ${fmt(median(pairs.map((p) => p.bare)))} req/s (median of ${ROUNDS})`,
)
console.log(
  `gridkeep heartbeat               : ${fmt(median(pairs.map((p) => p.gridkeep)))} req/s (median of ${ROUNDS})`,
)
console.log(
  `ratio                            : ${fmt(median(ratios) * 100, 1)} % median of paired rounds ` +
    `(range ${fmt(Math.min(...ratios) * 100, 1)}–${fmt(Math.max(...ratios) * 100, 1)} %; target ≥ 65 %)`,
)
if (errors) console.log(`errors: ${errors}`)

await bare.stop()
await pg?.close()
sqlite.close()
rmSync(dir, { recursive: true, force: true })
await gk.stop()
process.exit(0)
