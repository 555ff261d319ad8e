import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type FakeRuntime, startFakeRuntime } from '../test/helpers/fake-runtime'
import { type Bench, benchServer } from './lib/fixture'

// One batch, the whole fleet. Reference daemons (`gridkeep worker`, each its own process,
// so one can be SIGKILLed), each with its own stand-in engine of fixed slots and latency
// (test/helpers/fake-runtime.ts: requests past the slots queue, as llama-server's do), against a
// real gridkeep server in this process (HEARTBEAT_TIMEOUT_SECONDS=6, so a killed worker is noticed
// within seconds). Every daemon runs at its defaults (--concurrency auto, shards declared). Prints,
// each beside its ideal or bare baseline measured in the same run:
//   (a) the speedup of 4 workers over 1 on one 4,000-line chat batch, engines 8 slots × 40 ms
//       (goal ≥ 3.5 of an ideal 4);
//   (b) the requests run again after the busiest worker is SIGKILLed at 70 % of the batch, counted
//       by custom_id at the engines (goal ≤ one shard and ≤ 25 % of the batch);
//   (c) one worker against a 64-slot engine (40 ms), as a share of the engine's capacity and of a
//       bare loop of 64 concurrent requests to it (goal ≥ 85 %);
//   (d) against the real llama-server (bench/llama.ts BENCH_SWEEP=1): the daemon at
//       --concurrency auto beside each fixed concurrency of 1 to 16 (goal: auto ≥ 90 % of the best);
//   (e) the straggler: 4 workers, one 4,000-line batch, the busiest SIGKILLed at 70 %, with a
//       HEARTBEAT_TIMEOUT_SECONDS of 60 (the sweeper would release its shards only after that):
//       completion time over that of the same run without a crash, measured in the same run
//       (goal ≤ 1.5×: backup copies, docs/api.md §16, finish the dead worker's shards).
//
//   bun run bench/fleet.ts                 all five
//   BENCH_ONLY=a|b|c|d|e bun run bench/fleet.ts
//   BENCH_LINES=N (a, b, e)  BENCH_WIDE_LINES=N (c)  BENCH_ONE=1 (a: the 1-worker run only)
//   BENCH_RUNS=N (e: N pairs of runs, and their median)  BENCH_SHARD_MAX=N (SHARD_MAX_REQUESTS)
//   BENCH_TRACE=1 (daemon logs)  BENCH_SERVER_ENV=NAME=value,… (more server settings)

const LINES = Number(process.env.BENCH_LINES ?? 4_000)
/** More server settings, `NAME=value,NAME=value` (bench/placement.ts runs (e) under today's rules). */
const serverEnv = Object.fromEntries(
  (process.env.BENCH_SERVER_ENV ?? '')
    .split(',')
    .filter((kv) => kv.includes('='))
    .map((kv) => [kv.slice(0, kv.indexOf('=')).trim(), kv.slice(kv.indexOf('=') + 1).trim()]),
)
const WIDE_LINES = Number(process.env.BENCH_WIDE_LINES ?? 12_000)
const ONLY = process.env.BENCH_ONLY
const SLUG = 'bench-chat-model-q4km'
const RUNTIME_MODEL = 'bench/runtime-model'
const HEARTBEAT_TIMEOUT = 6
/** (e): long enough that only backup copies, not the sweeper, can finish a dead worker's shards. */
const STRAGGLER_HEARTBEAT_TIMEOUT = 60

const line = (i: number) =>
  JSON.stringify({
    custom_id: `req-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model: SLUG, messages: [{ role: 'user', content: `item req-${i}` }], max_tokens: 16 },
  })

async function json(res: Response) {
  const b = (await res.json()) as any
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(b)}`)
  return b
}

/** An engine that counts the runs of each request (by the custom_id carried in its prompt). */
function engine(slots: number, latencyMs: number) {
  const runs = new Map<string, number>()
  const rt = startFakeRuntime({
    models: [RUNTIME_MODEL],
    slots,
    latencyMs,
    onRequest: (body) => {
      const id = String(body?.messages?.[0]?.content ?? '').replace(/^item /, '')
      runs.set(id, (runs.get(id) ?? 0) + 1)
    },
  })
  return { rt, runs }
}

interface Fleet {
  server: Bench
  token: string
  daemons: ReturnType<typeof Bun.spawn>[]
  stop(): Promise<void>
}

async function fleet(
  dir: string,
  engines: FakeRuntime[],
  heartbeatTimeout = HEARTBEAT_TIMEOUT,
): Promise<Fleet> {
  mkdirSync(dir, { recursive: true })
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    `models:\n  - id: ${SLUG}\n    task_type: chat\n    quantization: Q4_K_M\n    vram_gb: 4\n    serving_profiles:\n      - runtime: openai\n        runtime_model_id: ${RUNTIME_MODEL}\n`,
  )
  const server = await benchServer({
    CATALOGUE_PATH: manifest,
    LOG_LEVEL: 'error',
    HEARTBEAT_TIMEOUT_SECONDS: String(heartbeatTimeout),
    SWEEP_INTERVAL_SECONDS: '1',
    ...(process.env.BENCH_SHARD_MAX ? { SHARD_MAX_REQUESTS: process.env.BENCH_SHARD_MAX } : {}),
    ...serverEnv,
  })
  const { access_token: token } = await json(
    await fetch(`${server.url}/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'bench@example.test', password: 'bench-password' }),
    }),
  )
  const daemons = engines.map((rt, i) =>
    Bun.spawn(
      [
        'bun',
        join(import.meta.dir, '../src/daemon/cli.ts'),
        '--server',
        server.url,
        '--runtime',
        'openai',
        '--runtime-url',
        rt.url,
        '--name',
        `fleet-${i}`,
        '--vram-gb',
        '24',
        '--state-dir',
        join(dir, `worker-${i}`),
        '--log-level',
        process.env.BENCH_TRACE ? 'info' : 'warn',
      ],
      {
        env: { ...process.env, GRIDKEEP_WORKER_KEY: server.key },
        stdout: process.env.BENCH_TRACE ? 'inherit' : 'ignore',
        stderr: 'inherit',
      },
    ),
  )
  // Every daemon is registered and idle: its poll is held by the server.
  while (server.deps.pollWaiters.size < engines.length) await Bun.sleep(10)
  return {
    server,
    token,
    daemons,
    async stop() {
      for (const d of daemons) d.kill('SIGKILL')
      await Promise.all(daemons.map((d) => d.exited))
      await server.stop()
    },
  }
}

async function upload(f: Fleet, n: number): Promise<string> {
  const form = new FormData()
  form.append('purpose', 'batch')
  form.append(
    'file',
    new Blob([`${Array.from({ length: n }, (_, i) => line(i)).join('\n')}\n`]),
    'input.jsonl',
  )
  const file = await json(
    await fetch(`${f.server.url}/v1/files`, {
      method: 'POST',
      headers: { authorization: `Bearer ${f.token}` },
      body: form,
    }),
  )
  return file.id
}

async function createBatch(f: Fleet, fileId: string): Promise<string> {
  const created = await json(
    await fetch(`${f.server.url}/v1/batches`, {
      method: 'POST',
      headers: { authorization: `Bearer ${f.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        input_file_id: fileId,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      }),
    }),
  )
  return created.id
}

/** Waits for the batch to end; `tick` runs every poll. Returns when it started and ended. */
async function finish(f: Fleet, id: string, n: number, tick?: () => void) {
  const status = f.server.deps.sqlite.query<{ status: string; completed: number }, [string]>(
    'select status, request_counts_completed as completed from batches where id = ?',
  )
  let running: number | null = null
  for (;;) {
    const row = status.get(id)!
    if (running === null && row.status === 'in_progress') running = performance.now()
    if (row.status === 'completed' || row.status === 'failed') {
      if (row.status !== 'completed' || row.completed !== n)
        throw new Error(`batch ended ${row.status} with ${row.completed}/${n} completed`)
      return { running: running ?? performance.now(), ended: performance.now() }
    }
    tick?.()
    await Bun.sleep(10)
  }
}

async function timedRun(dir: string, workers: number) {
  const engines = Array.from({ length: workers }, () => engine(8, 40))
  const f = await fleet(
    dir,
    engines.map((e) => e.rt),
  )
  try {
    const fileId = await upload(f, LINES)
    const t0 = performance.now()
    const id = await createBatch(f, fileId)
    const { ended } = await finish(f, id, LINES)
    const perWorker = engines.map((e) => e.rt.requests)
    return { secs: (ended - t0) / 1000, perWorker }
  } finally {
    await f.stop()
    for (const e of engines) await e.rt.stop()
  }
}

async function speedup(dir: string) {
  const one = await timedRun(join(dir, 'a1'), 1)
  if (process.env.BENCH_ONE) return console.log(`1 worker ${one.secs.toFixed(1)} s`)
  const four = await timedRun(join(dir, 'a4'), 4)
  const ideal = LINES / ((8 / 0.04) * 4)
  console.log(
    `(a) ${LINES} lines, engines 8 slots × 40 ms: 1 worker ${one.secs.toFixed(1)} s, 4 workers ${four.secs.toFixed(1)} s ` +
      `(requests per worker ${four.perWorker.join(', ')}; ideal ${ideal.toFixed(1)} s)\n` +
      `    speedup ${(one.secs / four.secs).toFixed(2)} of an ideal 4 (goal ≥ 3.5)`,
  )
}

/**
 * 4 workers drain one batch; with `kill`, the busiest is SIGKILLed once 70 % of the requests have
 * reached an engine. Returns the completion time (from the batch's creation), when the kill came,
 * and the requests run more than once (counted by custom_id at the engines).
 */
async function fourWorkers(dir: string, o: { kill: boolean; heartbeatTimeout: number }) {
  const engines = Array.from({ length: 4 }, () => engine(8, 40))
  const f = await fleet(
    dir,
    engines.map((e) => e.rt),
    o.heartbeatTimeout,
  )
  try {
    const fileId = await upload(f, LINES)
    const t0 = performance.now()
    const id = await createBatch(f, fileId)
    let victim = -1
    let killedAt = 0
    // The victim's shards when it died: what a backup copy has to run again.
    let lost: { shard_index: number; requests: number }[] = []
    const seen = () => {
      const all = new Set<string>()
      for (const e of engines) for (const k of e.runs.keys()) all.add(k)
      return all.size
    }
    const { ended } = await finish(f, id, LINES, () => {
      if (!o.kill || victim >= 0 || seen() < LINES * 0.7) return
      // The busiest worker: the one whose engine is serving the most requests right now.
      const busy = engines.map((e) => e.rt.inFlight)
      victim = busy.indexOf(Math.max(...busy))
      killedAt = performance.now()
      f.daemons[victim]!.kill('SIGKILL')
      lost = f.server.deps.sqlite
        .query<{ shard_index: number; requests: number }, [string, string]>(
          `select s.shard_index, s.requests from batch_shards s join workers w on w.id = s.worker_id
           where s.batch_id = ? and w.name = ? and s.status = 'running' order by s.shard_index`,
        )
        .all(id, `fleet-${victim}`)
    })
    let reruns = 0
    const total = new Map<string, number>()
    for (const e of engines) for (const [k, n] of e.runs) total.set(k, (total.get(k) ?? 0) + n)
    for (const n of total.values()) reruns += n - 1
    const shards = f.server.deps.sqlite
      .query<{ n: number; biggest: number; backups: number; won: number }, [string]>(
        `select count(*) as n, max(requests) as biggest, count(backup_worker_id) as backups,
           sum(backup_won) as won from batch_shards where batch_id = ?`,
      )
      .get(id)!
    return {
      secs: (ended - t0) / 1000,
      afterKill: (ended - killedAt) / 1000,
      victim,
      lost,
      reruns,
      shards,
      shardMax: f.server.config.SHARD_MAX_REQUESTS,
    }
  } finally {
    await f.stop()
    for (const e of engines) await e.rt.stop()
  }
}

async function killed(dir: string) {
  const r = await fourWorkers(dir, { kill: true, heartbeatTimeout: HEARTBEAT_TIMEOUT })
  console.log(
    `(b) 4 workers, ${LINES} lines, the busiest (fleet-${r.victim}) SIGKILLed at 70 %: completed ${r.secs.toFixed(1)} s ` +
      `(${r.afterKill.toFixed(1)} s after the kill; heartbeat timeout ${HEARTBEAT_TIMEOUT} s)\n` +
      `    requests run again: ${r.reruns} = ${((r.reruns / LINES) * 100).toFixed(1)} % of the batch ` +
      `(goal ≤ one shard and ≤ 25 %; ${r.shards.n} shards, the largest ${r.shards.biggest}, ` +
      `${r.shards.backups} backed up, SHARD_MAX_REQUESTS ${r.shardMax})`,
  )
}

async function straggler(dir: string) {
  const heartbeatTimeout = STRAGGLER_HEARTBEAT_TIMEOUT
  const runs = Number(process.env.BENCH_RUNS ?? 1)
  const backups = (r: Awaited<ReturnType<typeof fourWorkers>>) =>
    `${r.shards.backups} of ${r.shards.n} shards backed up, ${r.shards.won} won; ${r.reruns} requests run twice`
  console.log(`(e) the straggler: 4 workers, ${LINES} lines, heartbeat timeout ${heartbeatTimeout} s`)
  const ratios: number[] = []
  for (let i = 0; i < runs; i++) {
    const calm = await fourWorkers(join(dir, `calm-${i}`), { kill: false, heartbeatTimeout })
    const crash = await fourWorkers(join(dir, `crash-${i}`), { kill: true, heartbeatTimeout })
    const held = crash.lost.map((s) => `#${s.shard_index} of ${s.requests}`).join(', ') || 'none'
    ratios.push(crash.secs / calm.secs)
    console.log(
      `    no crash ${calm.secs.toFixed(1)} s (${backups(calm)})\n` +
        `    the busiest (fleet-${crash.victim}, holding shards ${held}) SIGKILLed at 70 %: ${crash.secs.toFixed(1)} s ` +
        `(${crash.afterKill.toFixed(1)} s after the kill; ${backups(crash)})\n` +
        `    crash / no crash = ${(crash.secs / calm.secs).toFixed(2)}× (goal ≤ 1.5×)`,
    )
  }
  if (runs > 1) {
    const sorted = [...ratios].sort((x, y) => x - y)
    console.log(`    median of ${runs}: ${sorted[Math.floor(runs / 2)]!.toFixed(2)}×`)
  }
}

/** A bare loop of `width` concurrent requests straight to the engine: requests per second. */
async function bare(url: string, n: number, width: number) {
  let next = 0
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) {
        const i = next++
        const res = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: RUNTIME_MODEL, messages: [{ role: 'user', content: `bare ${i}` }] }),
        })
        await res.text()
      }
    }),
  )
  return n / ((performance.now() - t0) / 1000)
}

async function wide(dir: string) {
  // The engine in its own process: at 1,600 requests/s it must not share a core with the server.
  const proc = Bun.spawn(
    [
      'bun',
      join(import.meta.dir, '../test/helpers/fake-runtime.ts'),
      '--slots',
      '64',
      '--latency-ms',
      '40',
      RUNTIME_MODEL,
    ],
    { stdout: 'pipe', stderr: 'inherit' },
  )
  const { value } = await proc.stdout.getReader().read()
  const url = new TextDecoder().decode(value).trim().split('\n')[0]!
  const rt = { url } as FakeRuntime
  try {
    const capacity = 64 / 0.04
    const direct = await bare(url, 8_000, 64)
    const f = await fleet(dir, [rt])
    try {
      const fileId = await upload(f, WIDE_LINES)
      const id = await createBatch(f, fileId)
      const { running, ended } = await finish(f, id, WIDE_LINES)
      const rps = WIDE_LINES / ((ended - running) / 1000)
      console.log(
        `(c) 1 worker at its defaults, engine 64 slots × 40 ms, ${WIDE_LINES} lines: ${rps.toFixed(0)} requests/s ` +
          `from in_progress to completed\n` +
          `    = ${((rps / capacity) * 100).toFixed(0)} % of the engine's capacity (${capacity}/s; goal ≥ 85 %), ` +
          `${((rps / direct) * 100).toFixed(0)} % of a bare loop of 64 concurrent requests (${direct.toFixed(0)}/s)`,
      )
    } finally {
      await f.stop()
    }
  } finally {
    proc.kill('SIGTERM')
    await proc.exited
  }
}

/** (d): bench/llama.ts's sweep, in its own process (it starts llama-server and its own server). */
async function realEngine() {
  const proc = Bun.spawn(['bun', join(import.meta.dir, 'llama.ts')], {
    env: { ...process.env, BENCH_SWEEP: '1', BENCH_LINES: process.env.BENCH_LLAMA_LINES ?? '400' },
    stdout: 'pipe',
    stderr: 'inherit',
  })
  const out = (await new Response(proc.stdout).text()).split('\n').filter((l) => /^( |\d|not run)/.test(l))
  await proc.exited
  console.log(`(d) ${out.join('\n    ').trim()}`)
}

const dir = mkdtempSync(join(tmpdir(), 'gk-fleet-'))
const t0 = performance.now()
try {
  if (!ONLY || ONLY === 'a') await speedup(dir)
  if (!ONLY || ONLY === 'b') await killed(join(dir, 'b'))
  if (!ONLY || ONLY === 'c') await wide(join(dir, 'c'))
  if (!ONLY || ONLY === 'd') await realEngine()
  if (!ONLY || ONLY === 'e') await straggler(join(dir, 'e'))
  console.log(`(whole bench ${((performance.now() - t0) / 1000).toFixed(0)} s)`)
} finally {
  rmSync(dir, { recursive: true, force: true })
}
process.exit(0)
