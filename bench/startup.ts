// Startup benchmark: time from spawning the compiled binary to its first 200 on /healthz,
// on an empty database (targets < 500 ms) and on one holding 1,000,000 batches (< 2 s), next to a
// bare baseline measured in the same run: a compiled minimal Bun.serve answering /healthz.
//
//   bun run bench/startup.ts                    (builds dist/gridkeep first)
//   BENCH_QUICK=1 bun run bench/startup.ts      (100,000 batches, 2 runs each)
//   GRIDKEEP_BINARY=path bun run bench/startup.ts   (measure an existing binary)

import { Database } from 'bun:sqlite'
import { copyFileSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { spawn } from 'bun'

const quick = !!process.env.BENCH_QUICK
const ROWS = Number(process.env.BENCH_ROWS ?? (quick ? 100_000 : 1_000_000))
const RUNS = Number(process.env.BENCH_RUNS ?? (quick ? 2 : 5))
const root = resolve(import.meta.dir, '..')
const out = join(root, 'bench/.out/startup')
rmSync(out, { recursive: true, force: true })
mkdirSync(out, { recursive: true })

// The same flags as `bun run build`.
const BUILD_FLAGS = ['--compile', '--bytecode', '--format=esm', '--minify-whitespace', '--minify-syntax']

async function sh(cmd: string[], cwd = root) {
  const proc = spawn(cmd, { cwd, stdout: 'pipe', stderr: 'pipe' })
  const code = await proc.exited
  if (code !== 0) throw new Error(`${cmd.join(' ')} failed:\n${await new Response(proc.stderr).text()}`)
}

// The baseline: the least a compiled Bun HTTP server does before its first answer.
const baselineSource = join(out, 'baseline.ts')
writeFileSync(
  baselineSource,
  `Bun.serve({ hostname: '127.0.0.1', port: Number(process.env.PORT), fetch: (r) =>
    new URL(r.url).pathname === '/healthz' ? Response.json({ status: 'ok' }) : new Response(null, { status: 404 }) })\n`,
)
const baseline = join(out, 'baseline')
await sh(['bun', 'build', baselineSource, ...BUILD_FLAGS, '--outfile', baseline])
let gridkeep = process.env.GRIDKEEP_BINARY
if (!gridkeep) {
  await sh(['bun', 'run', 'build'])
  gridkeep = join(root, 'dist/gridkeep')
}

function freePort(): number {
  const l = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = l.port
  l.stop(true)
  return port
}

/** Milliseconds from spawn to the first 200 on /healthz; then SIGTERM and wait for the exit. */
async function timeToHealthy(binary: string, env: Record<string, string>): Promise<number> {
  const port = freePort()
  const started = performance.now()
  const proc = spawn([binary], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn', ...env },
    stdout: 'ignore',
    stderr: 'pipe',
  })
  const url = `http://127.0.0.1:${port}/healthz`
  let elapsed = -1
  while (performance.now() - started < 60_000) {
    if (proc.exitCode !== null) throw new Error(`${binary} exited: ${await new Response(proc.stderr).text()}`)
    const ok = await fetch(url).then(
      (r) => r.status === 200,
      () => false,
    )
    if (ok) {
      elapsed = performance.now() - started
      break
    }
    await Bun.sleep(1)
  }
  proc.kill('SIGTERM')
  await proc.exited
  if (elapsed < 0) throw new Error(`${binary} never answered /healthz`)
  return elapsed
}

async function measure(label: string, binary: string, prepare: () => Record<string, string>) {
  const times: number[] = []
  for (let i = 0; i < RUNS; i++) times.push(await timeToHealthy(binary, prepare()))
  times.sort((a, b) => a - b)
  return { label, median: times[Math.floor(times.length / 2)]!, min: times[0]! }
}

// A database with ROWS batches, made once: the binary creates the schema, then one INSERT … SELECT
// over a recursive CTE fills it. Statuses are mixed like a long-lived server's, with 0.1 % still
// `validating`, which the validator picks up at start (through the status index).
async function prepareBigDatabase(): Promise<string> {
  const dir = join(out, 'big-template')
  await timeToHealthy(gridkeep!, { DATA_DIR: dir, ADMIN_PASSWORD: 'bench-admin-password' })
  const path = join(dir, 'gridkeep.db')
  const db = new Database(path)
  const user = db.query("SELECT id FROM users WHERE platform_role = 'superadmin'").get() as { id: string }
  const t0 = performance.now()
  db.query(
    `INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
       attempts, request_counts_total, request_counts_completed, created_at, updated_at)
     WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
     SELECT printf('batch_%024d', i), ?2, printf('file-%024d', i), '/v1/chat/completions', '24h',
       'bench-model-q4km',
       CASE WHEN i % 1000 = 0 THEN 'validating' WHEN i % 100 = 0 THEN 'validated'
            WHEN i % 20 = 0 THEN 'failed' ELSE 'completed' END,
       0, 100, 100, 1700000000 + i, 1700000000 + i
     FROM n`,
  ).run(ROWS, user.id)
  db.exec('PRAGMA wal_checkpoint(TRUNCATE)')
  const count = (db.query('SELECT count(*) AS n FROM batches').get() as { n: number }).n
  db.close()
  console.log(
    `prepared ${count.toLocaleString('en')} batches in ${((performance.now() - t0) / 1000).toFixed(1)} s ` +
      `(${(statSync(path).size / 1024 / 1024).toFixed(0)} MiB)`,
  )
  return dir
}

let runCount = 0
const freshDir = () => join(out, `run-${++runCount}`)

console.log(`startup to first 200 on /healthz: ${RUNS} runs each${quick ? ' (quick mode)' : ''}`)
const template = await prepareBigDatabase()

const results = [await measure('baseline: compiled Bun.serve', baseline, () => ({}))]
results.push(
  await measure('gridkeep, empty database (first start)', gridkeep, () => ({
    DATA_DIR: freshDir(),
    ADMIN_PASSWORD: 'bench-admin-password',
  })),
)
const small = join(out, 'small-template')
await timeToHealthy(gridkeep, { DATA_DIR: small, ADMIN_PASSWORD: 'bench-admin-password' })
results.push(
  await measure('gridkeep, restart, small database', gridkeep, () => {
    const dir = freshDir()
    mkdirSync(dir)
    for (const f of ['gridkeep.db', 'jwt-secret']) copyFileSync(join(small, f), join(dir, f))
    return { DATA_DIR: dir }
  }),
)
// Fresh copy per run: the validator changes the `validating` rows it finds.
results.push(
  await measure(`gridkeep, ${ROWS.toLocaleString('en')} batches`, gridkeep, () => {
    const dir = freshDir()
    mkdirSync(dir)
    for (const f of ['gridkeep.db', 'jwt-secret']) copyFileSync(join(template, f), join(dir, f))
    return { DATA_DIR: dir }
  }),
)

const base = results[0]!.median
const targets: Record<number, string> = { 1: '< 500 ms', 3: '< 2000 ms' }
for (const [i, r] of results.entries()) {
  const ratio = i === 0 ? '' : `  ${(r.median / base).toFixed(1)}x baseline`
  const target = targets[i]
    ? `  target ${targets[i]}: ${r.median < Number(targets[i].slice(2, -3)) ? 'met' : 'MISSED'}`
    : ''
  console.log(
    `  ${r.label.padEnd(44)} median ${r.median.toFixed(0).padStart(5)} ms  (min ${r.min.toFixed(0)})${ratio}${target}`,
  )
}
rmSync(out, { recursive: true, force: true })
