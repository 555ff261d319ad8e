// PostgreSQL (docs/api.md §12), on a throwaway cluster (scripts/postgres.ts):
// (1) 64 simulated workers, split across TWO gridkeep instances on one database, drain 10,000
//     validated batches over HTTP — claims/s and double claims (must be 0) — vs a bare
//     FOR UPDATE SKIP LOCKED claim loop (64 clients, Bun's SQL client) on the same data, same run
//     (target ≥ 50 %);
// (2) p50 latency of one poll with 100,000 batches queued vs 100, through HTTP (target ≤ 2×).
//
// The instances are child processes (`bun src/cli.ts serve`), as they are deployed: each has its
// own event loop and connection pool, and the two cores are shared by them, the load generator and
// PostgreSQL. Two servers in this process would put both instances and the 64 pollers on one thread,
// measuring this process's event loop rather than the claim path.
//
//   bun run bench/postgres.ts            (10,000 drained; 100,000 vs 100 queued)
//   bun run bench/postgres.ts --quick    (2,000 drained; 20,000 vs 100 queued)

import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SQL } from 'bun'
import { createServer } from '../src/compose'
import { loadConfig } from '../src/config'
import { SYSTEM_AUDIT } from '../src/domain/audit'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../src/lib/keys'
import { setLogSink } from '../src/lib/logger'
import { createPasswords } from '../src/lib/passwords'
import { createUser } from '../src/modules/users/service'
import { freshPostgresUrl } from '../test/helpers/postgres'
import { post } from './lib/fixture'
import { fmt, percentile, quick } from './lib/load'

const WORKERS = 64
const DRAIN = quick ? 2_000 : 10_000
const BIG = quick ? 20_000 : 100_000
const SMALL = 100
const SAMPLES = 60
const JWT_SECRET = 'bench-secret-bench-secret-bench-secret-0123'

setLogSink(() => {})

interface Seeded {
  url: string
  sql: SQL
  key: string
  userId: string
}

/** A fresh, migrated database with one user, one worker key and `models` in the catalogue. */
/** The catalogue entry id for a runtime model name, as the batches name it: `drain:8b` → `drain-8b-q4km`. */
const entryId = (model: string) => `${model.replace(':', '-')}-q4km`

async function seededDatabase(models: string[]): Promise<Seeded> {
  const url = await freshPostgresUrl()
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-'))
  const config = loadConfig({ DATA_DIR: dir, DATABASE_URL: url, JWT_SECRET })
  const deps = createServer(config, { passwords: createPasswords({ memoryCost: 256, timeCost: 1 }) })
  await deps.store.ready()
  const user = await createUser(
    deps,
    {
      email: 'bench@example.test',
      password: 'bench-password',
      full_name: 'Bench',
    },
    SYSTEM_AUDIT,
  )
  const [personal] = await deps.store.orgs.listMembershipsOf(user.id)
  const key = generateRawKey()
  await deps.store.keys.createKey(
    { type: 'worker', orgId: personal!.org_id },
    {
      name: 'bench',
      prefix: keyDisplayPrefix(key),
      key_hash: sha256Hex(key),
      created_by: user.id,
      created_at: deps.clock.now(),
      expires_at: null,
    },
    SYSTEM_AUDIT,
  )
  await deps.store.close()
  rmSync(dir, { recursive: true, force: true })
  const sql = new SQL({ url, max: WORKERS })
  const now = Math.floor(Date.now() / 1000)
  for (const model of models)
    await sql`INSERT INTO catalog_entries (id, display_name, runtime, runtime_model_id, vram_gb, size_gb,
        parameter_size, task_type, created_at, updated_at)
      VALUES (${entryId(model)}, ${entryId(model)}, 'ollama', ${model}, 8, 5, '8B', 'chat', ${now}, ${now})`
  return { url, sql, key, userId: user.id }
}

/** `count` validated batches of the catalogue entry for `model`, in one statement. */
async function addValidatedBatches(s: Seeded, model: string, count: number) {
  const now = Math.floor(Date.now() / 1000)
  await s.sql`INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
      request_counts_total, created_at, updated_at)
    SELECT 'batch_' || md5(random()::text || g), ${s.userId}, 'file-' || md5(random()::text || g),
      '/v1/chat/completions', '24h', ${entryId(model)}, 'validated', 1, ${now}, ${now}
    FROM generate_series(1, ${count}::int) g`
  await s.sql`ANALYZE batches`
}

async function freePort(): Promise<number> {
  const probe = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const { port } = probe
  probe.stop(true)
  return port
}

/** One gridkeep instance on `url`, as its own process; resolves once /healthz answers. */
async function instance(url: string) {
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-'))
  const port = await freePort()
  const proc = Bun.spawn(['bun', 'src/cli.ts', 'serve'], {
    cwd: join(import.meta.dir, '..'),
    env: {
      ...process.env,
      DATABASE_URL: url,
      JWT_SECRET,
      DATA_DIR: dir,
      HOST: '127.0.0.1',
      PORT: String(port),
      ADMIN_PASSWORD: 'bench-admin-password',
      LOG_LEVEL: 'warn',
    },
    stdout: 'ignore',
    stderr: 'inherit',
  })
  const base = `http://127.0.0.1:${port}`
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`instance exited with ${proc.exitCode}`)
    const ok = await fetch(`${base}/healthz`).then(
      (r) => r.ok,
      () => false,
    )
    if (ok) break
    await Bun.sleep(50)
  }
  return {
    url: base,
    pid: proc.pid,
    async stop() {
      proc.kill('SIGTERM')
      await proc.exited
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux). */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) / 100 // utime, stime in clock ticks
  } catch {
    return 0 // gone, or no /proc
  }
}

/** CPU seconds of the PostgreSQL backends serving `sql`'s database now. */
async function backendCpuSeconds(sql: SQL): Promise<number> {
  const rows = await sql`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`
  return rows.reduce((sum: number, r: { pid: number }) => sum + cpuSeconds(r.pid), 0)
}

const ownCpuSeconds = () => {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1e6
}

async function register(base: string, key: string, name: string, model: string, slots: number) {
  const reg = await post(`${base}/workers/register`, key, {
    name,
    models: [model],
    max_concurrent_jobs: slots,
    runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
  })
  return reg.worker_id as string
}

// ---- (1a) the drain across two instances -------------------------------------------------------
const gridkeep = await (async () => {
  const db = await seededDatabase(['drain:8b'])
  await addValidatedBatches(db, 'drain:8b', DRAIN)
  const instances = [await instance(db.url), await instance(db.url)]
  const pollers: { base: string; worker_id: string }[] = []
  for (let i = 0; i < WORKERS; i++) {
    const base = instances[i % 2]!.url
    pollers.push({ base, worker_id: await register(base, db.key, `w${i}`, 'drain:8b', 1024) })
  }
  const seen = new Map<string, number>()
  const cpu0 = {
    instances: instances.reduce((sum, i) => sum + cpuSeconds(i.pid), 0),
    pg: await backendCpuSeconds(db.sql),
    pollers: ownCpuSeconds(),
  }
  const t0 = performance.now()
  await Promise.all(
    pollers.map(async ({ base, worker_id }) => {
      for (;;) {
        const { job } = await post(`${base}/workers/poll`, db.key, { worker_id })
        if (!job) return
        seen.set(job.job_id, (seen.get(job.job_id) ?? 0) + 1)
      }
    }),
  )
  const seconds = (performance.now() - t0) / 1000
  const cpu = {
    instances: instances.reduce((sum, i) => sum + cpuSeconds(i.pid), 0) - cpu0.instances,
    pg: (await backendCpuSeconds(db.sql)) - cpu0.pg,
    pollers: ownCpuSeconds() - cpu0.pollers,
  }
  const [row] = await db.sql`SELECT count(*)::int AS n, count(DISTINCT batch_id)::int AS d
    FROM batch_assignments`
  await Promise.all(instances.map((i) => i.stop()))
  await db.sql.close()
  return {
    seconds,
    distinct: seen.size,
    doubles: [...seen.values()].filter((n) => n > 1).length,
    assignments: row.n as number,
    assigned: row.d as number,
    cpu,
  }
})()

// ---- (1b) the bare baseline: the claim and nothing else, 64 clients ------------------------------
// A head probe of its own (status, model, seq) index, written like the store's (claimOne in
// src/store/postgres/queue.ts): with a plain `status = 'validated' … ORDER BY seq` the planner walks
// the primary key past every batch claimed so far, and the baseline would measure that instead of
// the claim.
const bare = await (async () => {
  const db = await seededDatabase(['drain:8b'])
  // The cheapest head probe there is: one model, oldest first, nothing else in the key.
  await db.sql`CREATE INDEX bare_head ON batches (status, model, seq)`
  await addValidatedBatches(db, 'drain:8b', DRAIN)
  const model = entryId('drain:8b')
  let claimed = 0
  // Backends opened during the drain start from 0: the sum before counts the seeding's.
  const cpu0 = { pg: await backendCpuSeconds(db.sql), client: ownCpuSeconds() }
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      for (;;) {
        const got = await db.sql.begin(async (tx) => {
          const now = Math.floor(Date.now() / 1000)
          const [b] = await tx`UPDATE batches SET status = 'in_progress', in_progress_at = ${now},
              updated_at = ${now}
            WHERE id = (SELECT id FROM batches WHERE status = ANY('{validated}'::text[])
              AND model = ${model} ORDER BY status, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
            RETURNING id`
          if (!b) return false
          await tx`INSERT INTO batch_assignments (id, batch_id, worker_id, org_id, assigned_at)
            VALUES (${`asg_${crypto.randomUUID()}`}, ${b.id}, ${`w${w}`}, 'org', ${now})`
          return true
        })
        if (!got) return
        claimed++
      }
    }),
  )
  const seconds = (performance.now() - t0) / 1000
  const cpu = { pg: (await backendCpuSeconds(db.sql)) - cpu0.pg, client: ownCpuSeconds() - cpu0.client }
  await db.sql.close()
  return { seconds, claimed, cpu }
})()

const gkRate = gridkeep.distinct / gridkeep.seconds
const bareRate = bare.claimed / bare.seconds
console.log(`drain: ${WORKERS} workers over two instances (child processes), ${fmt(DRAIN)} batches`)
console.log(
  `  claimed ${fmt(gridkeep.distinct)} distinct; ${fmt(gridkeep.assignments)} assignments of ` +
    `${fmt(gridkeep.assigned)} distinct batches; double claims: ${gridkeep.doubles}`,
)
console.log(`  gridkeep: ${fmt(gkRate)} claims/s over HTTP (${fmt(gridkeep.seconds, 2)} s)`)
console.log(
  `  bare SKIP LOCKED loop, ${WORKERS} clients: ${fmt(bareRate)} claims/s (${fmt(bare.claimed)} in ` +
    `${fmt(bare.seconds, 2)} s)`,
)
console.log(`  ratio: ${fmt((100 * gkRate) / bareRate)} % (target ≥ 50 %)`)
// Where the time goes: on a shared 2-core machine, CPU per claim is what the rates divide.
const ms = (cpuSeconds: number, claims: number) => `${fmt((1000 * cpuSeconds) / claims, 2)} ms`
console.log(
  `  CPU per claim, gridkeep: instances ${ms(gridkeep.cpu.instances, gridkeep.distinct)}, ` +
    `PostgreSQL ${ms(gridkeep.cpu.pg, gridkeep.distinct)}, pollers ${ms(gridkeep.cpu.pollers, gridkeep.distinct)}`,
)
console.log(
  `  CPU per claim, bare: PostgreSQL ${ms(bare.cpu.pg, bare.claimed)}, client ${ms(bare.cpu.client, bare.claimed)}`,
)

// ---- (2) latency vs queue depth ------------------------------------------------------------------
// One instance per queue depth; polls are sequential HTTP requests through the whole app (auth,
// validation, matching, claim); the first SAMPLES warm up, the next SAMPLES are measured.
async function p50At(queued: number) {
  const db = await seededDatabase(['lat:8b', 'other:8b'])
  // Some other models queued too: the probe must not scan them.
  await addValidatedBatches(db, 'other:8b', queued)
  // Topped up by the polls taken, so the depth stays at `queued` (+/- the samples).
  await addValidatedBatches(db, 'lat:8b', queued + SAMPLES)
  const gk = await instance(db.url)
  const worker_id = await register(gk.url, db.key, 'lat', 'lat:8b', SAMPLES * 2)
  const times: number[] = []
  for (let i = 0; i < SAMPLES * 2; i++) {
    const t0 = performance.now()
    const { job } = await post(`${gk.url}/workers/poll`, db.key, { worker_id })
    if (!job) throw new Error('no job')
    if (i >= SAMPLES) times.push(performance.now() - t0) // the first half warms up
  }
  await gk.stop()
  await db.sql.close()
  return percentile(times, 50)
}

const small = await p50At(SMALL)
const big = await p50At(BIG)
console.log(`poll p50 with ${fmt(SMALL)} queued: ${fmt(small * 1000)} µs`)
console.log(`poll p50 with ${fmt(BIG)} queued: ${fmt(big * 1000)} µs`)
console.log(`ratio: ${fmt(big / small, 2)}× (target ≤ 2×)`)
process.exit(0)
