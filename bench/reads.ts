// The read paths users feel, at concurrency 64, each beside a bare `Bun.serve` that
// answers the same bytes, measured in alternating pairs in this run:
// (1) GET /v1/models with a JWT, with 200 online workers and with 10,000 (target ≥ 50 % of bare,
//     and a cost independent of the fleet's size);
// (2) GET /v1/pool/capacity answered from its cache (target ≥ 70 % of bare).
// SQLite by default; with DATABASE_URL (or --postgres: a throwaway cluster, scripts/postgres.ts)
// on PostgreSQL.
//
//   bun run bench/reads.ts              (5 paired rounds of 2 s per side)
//   bun run bench/reads.ts --quick      (3 paired rounds of 1 s per side; 2,000 workers for the large fleet)
//   bun run bench/reads.ts --postgres

import { SQL } from 'bun'
import { newId } from '../src/lib/ids'
import { freshPostgresUrl } from '../test/helpers/postgres'
import { benchServer } from './lib/fixture'
import { fmt, load, mainThreadCpuMicros, quick } from './lib/load'

const CONCURRENCY = 64
const ROUNDS = quick ? 3 : 5
const SIDE_MS = quick ? 1000 : 2000
const SMALL_FLEET = 200
const LARGE_FLEET = quick ? 2_000 : 10_000
const MODELS = 20

const postgres = process.argv.includes('--postgres') ? await freshPostgresUrl() : process.env.DATABASE_URL
const gk = await benchServer({ LOG_LEVEL: 'warn', ...(postgres ? { DATABASE_URL: postgres } : {}) })
const { deps } = gk
const pg = postgres ? new SQL({ url: postgres, max: 4 }) : undefined

type Row = Record<string, string | number | boolean | null>

/** Bulk insert on either engine (fixtures only; the server reads them through its store). */
async function insert(table: string, rows: Row[]) {
  if (rows.length === 0) return
  const cols = Object.keys(rows[0]!)
  if (pg) {
    for (let i = 0; i < rows.length; i += 1000)
      await pg`INSERT INTO ${pg(table)} ${pg(rows.slice(i, i + 1000))}`
    return
  }
  const stmt = deps.sqlite.prepare(
    `insert into ${table} (${cols.join(', ')}) values (${cols.map(() => '?').join(', ')})`,
  )
  deps.sqlite.transaction(() => {
    for (const r of rows) stmt.run(...(cols.map((c) => r[c]) as never[]))
  })()
}

const now = deps.clock.now()
await insert(
  'catalog_entries',
  Array.from({ length: MODELS }, (_, i) => ({
    id: `model-${i}-q4km`,
    display_name: `Model ${i}`,
    runtime: 'ollama',
    runtime_model_id: `model-${i}:latest`,
    vram_gb: i % 2 ? 16 : 48,
    size_gb: 5,
    parameter_size: '8B',
    task_type: 'chat',
    created_at: now,
    updated_at: now,
  })),
)

let fleetSize = 0
/** Grows the fleet to `size` online workers (2 GPUs, 3 hosted models each), all seen just now. */
async function growFleet(size: number) {
  const workers: Row[] = []
  const gpus: Row[] = []
  const models: Row[] = []
  for (let i = fleetSize; i < size; i++) {
    const id = newId('wrk_')
    workers.push({
      id,
      org_id: gk.orgId,
      name: `w${i}`,
      hostname: `host-${i}`,
      status: 'online',
      activity: i % 3 === 0 ? 'busy' : 'idle',
      vram_total_gb: 24,
      loaded_models: '[]',
      max_concurrent_jobs: 1,
      max_download_gb: 0,
      registered_at: now - 3600,
      last_heartbeat_at: now,
      last_seen_at: now,
    })
    for (let g = 0; g < 2; g++) gpus.push({ worker_id: id, vendor: 'nvidia', name: 'RTX 4090', vram_gb: 24 })
    // Models 0–9 hosted somewhere; 10–19 by nobody (not servable): both kinds are answered.
    for (let k = 0; k < 3; k++) {
      const name = `model-${(i + k) % (MODELS / 2)}:latest`
      models.push({
        worker_id: id,
        name,
        runtime: 'ollama',
        runtime_model_id: name,
        on_disk: true,
        advertised: true,
      })
    }
  }
  await insert('workers', workers)
  await insert('worker_gpus', gpus)
  await insert('worker_models', models)
  fleetSize = size
}

const jwt = (await deps.tokens.sign(gk.userId, 0)).token
const headersFor = (auth?: string): Record<string, string> =>
  auth ? { authorization: `Bearer ${auth}` } : {}
const get = (path: string, auth?: string) => [
  { url: `${gk.url}${path}`, method: 'GET', headers: headersFor(auth) },
]

/**
 * The same bytes and headers from a bare Bun.serve, asked with the same request (the Authorization
 * header included: the bare server ignores it, but receives and parses it like gridkeep).
 */
async function bareOf(path: string, auth?: string) {
  const res = await fetch(`${gk.url}${path}`, { headers: headersFor(auth) })
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`)
  const text = await res.text()
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    fetch: () => new Response(text, { headers: { 'content-type': 'application/json' } }),
  })
  return {
    server,
    bytes: text.length,
    requests: [{ url: `http://127.0.0.1:${server.port}${path}`, method: 'GET', headers: headersFor(auth) }],
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

/** Alternating paired rounds (bare, gridkeep); the median of the pairs' ratios, with the range. */
async function compare(label: string, path: string, auth: string | undefined, target: string) {
  const bare = await bareOf(path, auth)
  const mine = get(path, auth)
  await load(bare.requests, CONCURRENCY, 300)
  await load(mine, CONCURRENCY, 300)
  const pairs: { bare: number; gk: number; p50: number; bareCpu: number; gkCpu: number }[] = []
  let errors = 0
  for (let r = 0; r < ROUNDS; r++) {
    const cpu0 = mainThreadCpuMicros() ?? 0
    const b = await load(bare.requests, CONCURRENCY, SIDE_MS)
    const cpu1 = mainThreadCpuMicros() ?? 0
    const g = await load(mine, CONCURRENCY, SIDE_MS)
    const cpu2 = mainThreadCpuMicros() ?? 0
    pairs.push({
      bare: b.perSecond,
      gk: g.perSecond,
      p50: g.p50Ms,
      bareCpu: (cpu1 - cpu0) / b.count,
      gkCpu: (cpu2 - cpu1) / g.count,
    })
    errors += b.errors + g.errors
  }
  bare.server.stop(true)
  const ratios = pairs.map((p) => p.gk / p.bare)
  console.log(
    `${label.padEnd(44)}: ${fmt(median(pairs.map((p) => p.gk)))} req/s, p50 ${fmt(median(pairs.map((p) => p.p50)), 1)} ms ` +
      `vs bare ${fmt(median(pairs.map((p) => p.bare)))} req/s (${bare.bytes} B) → ${fmt(median(ratios) * 100, 1)} % ` +
      `(range ${fmt(Math.min(...ratios) * 100, 1)}–${fmt(Math.max(...ratios) * 100, 1)} %; target ${target})` +
      (mainThreadCpuMicros() === undefined
        ? ''
        : `; server CPU ${fmt(median(pairs.map((p) => p.gkCpu)), 1)} vs ${fmt(median(pairs.map((p) => p.bareCpu)), 1)} µs/req`) +
      (errors ? `; ${errors} errors` : ''),
  )
  return median(ratios)
}

console.log(
  `${postgres ? 'PostgreSQL' : 'SQLite'}, concurrency ${CONCURRENCY}, ${ROUNDS} paired rounds of ${SIDE_MS / 1000} s per side`,
)
await growFleet(SMALL_FLEET)
const small = await compare(`GET /v1/models, JWT, ${fmt(SMALL_FLEET)} workers`, '/v1/models', jwt, '≥ 50 %')
await growFleet(LARGE_FLEET)
const large = await compare(`GET /v1/models, JWT, ${fmt(LARGE_FLEET)} workers`, '/v1/models', jwt, '≥ 50 %')
console.log(
  `fleet size ${fmt(SMALL_FLEET)} → ${fmt(LARGE_FLEET)}: ratio ${fmt((large / small) * 100, 0)} % of the small fleet's`,
)
await compare('GET /v1/pool/capacity, anonymous, cached', '/v1/pool/capacity', undefined, '≥ 70 %')
await compare('GET /v1/pool/capacity, JWT, cached', '/v1/pool/capacity', jwt, '≥ 70 %')

await pg?.close()
await gk.stop()
process.exit(0)
