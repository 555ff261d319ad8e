// One sweeper pass over 10,000 workers of which 1,000 went silent holding a batch each (target
// < 200 ms), and pool capacity computed uncached with 10,000 online workers (target < 50 ms).
// Each is printed beside a bare baseline measured on the same data in this run.
//
//   bun run bench/sweeper-pool.ts            (10,000 workers)
//   bun run bench/sweeper-pool.ts --quick    (2,000 workers)

import { newId } from '../src/lib/ids'
import { computeCapacity } from '../src/modules/pool/service'
import { runOnce } from '../src/services/sweeper'
import { addEntry, benchServer } from './lib/fixture'
import { fmt, percentile, quick } from './lib/load'

const WORKERS = quick ? 2_000 : 10_000
const SILENT = WORKERS / 10
const MODELS = 20

/** WORKERS workers (2 GPUs, 3 hosted models each); the first `silent` last seen long ago. */
function populate(
  deps: Awaited<ReturnType<typeof benchServer>>['deps'],
  orgId: string,
  userId: string,
  silent: number,
) {
  const now = deps.clock.now()
  const db = deps.sqlite
  const w = db.prepare(
    `insert into workers (id, org_id, name, hostname, status, activity, vram_total_gb, loaded_models,
       max_concurrent_jobs, max_download_gb, registered_at, last_heartbeat_at, last_seen_at)
     values (?, ?, ?, ?, 'online', ?, 24, '[]', 1, 0, ?, ?, ?)`,
  )
  const g = db.prepare(
    `insert into worker_gpus (worker_id, vendor, name, vram_gb) values (?, 'nvidia', 'RTX 4090', 24)`,
  )
  const m = db.prepare(
    `insert into worker_models (worker_id, name, runtime, runtime_model_id, on_disk, advertised) values (?, ?, 'ollama', ?, 1, 1)`,
  )
  const b = db.prepare(
    `insert into batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
       request_counts_total, created_at, updated_at, in_progress_at)
     values (?, ?, ?, '/v1/chat/completions', '24h', 'model-0-q4km', 'in_progress', 1, ?, ?, ?)`,
  )
  const a = db.prepare(
    `insert into batch_assignments (id, batch_id, worker_id, org_id, assigned_at) values (?, ?, ?, ?, ?)`,
  )
  db.transaction(() => {
    for (let i = 0; i < WORKERS; i++) {
      const id = newId('wrk_')
      const seen = i < silent ? now - 600 : now
      w.run(id, orgId, `w${i}`, `host-${i}`, i % 3 === 0 ? 'busy' : 'idle', now - 3600, seen, seen)
      g.run(id)
      g.run(id)
      for (let k = 0; k < 3; k++) {
        const name = `model-${(i + k) % MODELS}:latest`
        m.run(id, name, name)
      }
      if (i < silent) {
        const batch = newId('batch_')
        b.run(batch, userId, newId('file-'), now, now, now)
        a.run(newId('asg_'), batch, id, orgId, now)
      }
    }
  })()
}

const gk = await benchServer({ LOG_LEVEL: 'warn' })
for (let i = 0; i < MODELS; i++)
  addEntry(gk.deps, `model-${i}-q4km`, `model-${i}:latest`, { vram_gb: i % 2 ? 16 : 48 })
populate(gk.deps, gk.orgId, gk.userId, SILENT)
gk.deps.startedAt = gk.deps.clock.now() - 3600 // past the startup grace

// Sweeper: the bare baseline is the single UPDATE that marks the silent workers offline, run on a
// copy of the same state inside a rolled-back transaction.
const bare = gk.deps.sqlite.prepare(
  `update workers set status = 'offline' where status = 'online' and last_seen_at <= ?`,
)
const tb = performance.now()
gk.deps.sqlite.exec('BEGIN')
bare.run(gk.deps.clock.now() - gk.config.HEARTBEAT_TIMEOUT_SECONDS)
gk.deps.sqlite.exec('ROLLBACK')
const bareMs = performance.now() - tb
const t0 = performance.now()
const result = await runOnce(gk.deps)
const sweepMs = performance.now() - t0
console.log(`sweeper pass over ${fmt(WORKERS)} workers (${fmt(SILENT)} silent, each holding a batch):`)
console.log(
  `  ${fmt(sweepMs, 1)} ms — ${fmt(result.workers_offline.length)} offline, ${fmt(result.requeued.length)} requeued (target < 200 ms)`,
)
console.log(`  bare single UPDATE: ${fmt(bareMs, 1)} ms (ratio ${fmt(sweepMs / bareMs, 1)}×)`)

// Pool capacity, uncached, for a signed-in user (the fuller view), with all WORKERS online: the
// swept ones heartbeat again first.
gk.deps.sqlite
  .prepare(
    `update workers set status = 'online', last_seen_at = ?, last_heartbeat_at = ? where status = 'offline'`,
  )
  .run(gk.deps.clock.now(), gk.deps.clock.now())
const user = gk.deps.sqlite.query('select * from users where id = ?').get(gk.userId) as never
const principal = { kind: 'user' as const, via: 'jwt' as const, user, keyId: null }
const counts = gk.deps.sqlite.prepare(
  `select count(*) n, sum(activity = 'idle') idle, sum(vram_total_gb) vram from workers
   where status = 'online' and last_seen_at > ?`,
)
const poolTimes: number[] = []
const bareTimes: number[] = []
let view = await computeCapacity(gk.deps, principal)
for (let i = 0; i < 20; i++) {
  const a = performance.now()
  view = await computeCapacity(gk.deps, principal)
  poolTimes.push(performance.now() - a)
  const c = performance.now()
  counts.get(gk.deps.clock.now() - 120)
  bareTimes.push(performance.now() - c)
}
const poolMs = percentile(poolTimes, 50)
const bareCountMs = percentile(bareTimes, 50)
console.log(
  `pool capacity, uncached, ${fmt(view.workers_online)} online workers, ${view.models_servable.length} servable models:`,
)
console.log(`  p50 ${fmt(poolMs, 2)} ms (target < 50 ms)`)
console.log(`  bare count/sum query: ${fmt(bareCountMs, 2)} ms (ratio ${fmt(poolMs / bareCountMs, 1)}×)`)
await gk.stop()
process.exit(0)
