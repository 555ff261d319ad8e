import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Bench, benchServer } from './lib/fixture'
import { clairvoyantPlans, type Plans } from './lib/plan'
import { type Router, startRouter } from './lib/router'

// Placement (docs/api.md §7 Placement): which worker loads what, and no batch starves. Four reference
// daemons that load their models themselves (`gridkeep worker --runtime llama.cpp --runtime-url`),
// each attached to its own stand-in llama.cpp router (bench/lib/router.ts: one model at a time,
// 8 slots × 40 ms a request, LOAD_MS to load another); three models on every disk; batches of the
// three with skewed demand (70 / 22 / 8 % of the requests), in two workloads:
//   mixed  a backlog of 30 % of each model's requests waiting at the start, the rest arriving over
//          ARRIVE_S seconds (alpha all along, bravo in a burst, charlie now and then)
//   late   the same, but charlie's batches all arrive late (in the second half of ARRIVE_S), once
//          the workers have settled on alpha and bravo: whether to pull a worker off its model for
//          them is the rule's to decide
// Each runs under the rules before placement (PLACEMENT=loaded_first) and with it (PLACEMENT=queue):
//   makespan ÷ its lower bound: the same requests, all of one model and all waiting at the start,
//     on the same fleet in this run (one load, then every worker busy: total ÷ the fleet's rate as
//     this machine runs it, + one load; the nominal figure is printed beside it)   goal ≤ 1.15
//   loads ÷ the fewest that could serve the workload: every model loaded on as many workers as its
//     share of the requests needs, rounded up (Σ ⌈workers × share⌉ = 3 + 1 + 1)  goal ≤ 1.5
//   loads ÷ those of the plan that knew the arrivals (bench/lib/plan.ts: an offline schedule of the
//     same batches on an idealised fleet): the fewest loads of a plan whose makespan ÷ its own
//     bound is at most this run's; the plan's makespan beside it                   goal ≤ 1.25
//   the longest any batch waited, from its creation (≥ from `validated`) to its first request at
//     an engine                                                                    goal ≤ aging + one load
//   then the straggler case, bench/fleet.ts (e) run under each rule set (loaded_first with no backup
//   copies, SHARD_BACKUPS=false); BENCH_NO_STRAGGLER=1 leaves it out
//
//   bun run bench/placement.ts            10,000 requests
//   BENCH_QUICK=1 bun run bench/placement.ts   4,000 requests
//   BENCH_ONLY=queue|loaded_first   BENCH_WORKLOAD=mixed|late   BENCH_LOADS=1 (each worker's loads,
//   and the plan's)   BENCH_TRACE=1 (daemon logs)

const QUICK = !!process.env.BENCH_QUICK || process.argv.includes('--quick')
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? (QUICK ? 4_000 : 10_000))
const ARRIVE_S = Number(process.env.BENCH_ARRIVE_S ?? (QUICK ? 4 : 10))
/** The share of each model's requests waiting at the start. */
const BACKLOG = 0.3
const WORKERS = 4
const SLOTS = 8
const LATENCY_MS = 40
const LOAD_MS = 3_000
const MAX_WAIT_S = 10
const FLEET_RATE = (WORKERS * SLOTS * 1000) / LATENCY_MS
const MODELS = [
  { name: 'alpha', share: 0.7 },
  { name: 'bravo', share: 0.22 },
  { name: 'charlie', share: 0.08 },
]
const slug = (model: string) => `${model}-q4km`

interface Planned {
  k: number
  model: string
  requests: number
  /** When it is created, ms after the start. */
  atMs: number
}

type Workload = 'mixed' | 'late'
type Mode = 'loaded_first' | 'queue'

/** When each model's batches arrive, as fractions of ARRIVE_S, and the share of them waiting at the start. */
const ARRIVALS: Record<Workload, Record<string, { backlog: number; from: number; to: number }>> = {
  mixed: {
    alpha: { backlog: BACKLOG, from: 0, to: 1 },
    bravo: { backlog: BACKLOG, from: 0.4, to: 0.6 },
    charlie: { backlog: BACKLOG, from: 0, to: 1 },
  },
  late: {
    alpha: { backlog: BACKLOG, from: 0, to: 1 },
    bravo: { backlog: BACKLOG, from: 0.4, to: 0.6 },
    charlie: { backlog: 0, from: 0.5, to: 1 },
  },
}

/** A fixed pseudo-random sequence (mulberry32), so every run gets the same workload. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/**
 * Batches of 100–200 requests (never split: at most 2 × SHARD_MIN_REQUESTS), arriving as ARRIVALS
 * says. `only`: every batch is of that model and waits at the start instead (the lower bound's run).
 */
function workload(kind: Workload, only?: string): Planned[] {
  const next = random(7)
  const out: Planned[] = []
  for (const m of MODELS) {
    const { backlog, from, to } = ARRIVALS[kind][m.name]!
    let left = Math.round(REQUESTS * m.share)
    const arriving = Math.round(left * (1 - backlog))
    while (left > 0) {
      const requests = Math.min(left, 100 + Math.floor(next() * 101))
      const atMs = left > arriving ? 0 : Math.round((from + next() * (to - from)) * ARRIVE_S * 1000)
      left -= requests
      out.push({ k: 0, model: only ?? m.name, requests, atMs: only ? 0 : atMs })
    }
  }
  // The backlog in no particular order of models (a queue as it stands), the rest as it arrives.
  const order = new Map(out.map((p) => [p, next()]))
  out.sort((a, b) => a.atMs - b.atMs || order.get(a)! - order.get(b)!)
  out.forEach((p, k) => {
    p.k = k
  })
  return out
}

async function json(res: Response) {
  const b = (await res.json()) as any
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(b)}`)
  return b
}

interface Result {
  makespanS: number
  loads: number
  /** The longest wait of a batch of each model, seconds. */
  waits: Record<string, number>
}

const longest = (r: Result) => Object.entries(r.waits).reduce((a, b) => (b[1] > a[1] ? b : a))

async function run(placement: Mode, plan: Planned[], label: string = placement): Promise<Result> {
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-placement-'))
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    `models:\n${MODELS.map(
      (m) =>
        `  - id: ${slug(m.name)}\n    task_type: chat\n    quantization: Q4_K_M\n    vram_gb: 8\n    serving_profiles:\n      - runtime: llama.cpp\n        runtime_model_id: ${m.name}\n`,
    ).join('')}`,
  )
  // Three models on every disk (tiny files: the daemon hashes what the router names).
  const disk = join(dir, 'models')
  mkdirSync(disk)
  const files = Object.fromEntries(
    MODELS.map((m) => {
      const path = join(disk, `${m.name}.gguf`)
      writeFileSync(path, `GGUF stand-in ${m.name}`)
      return [m.name, path]
    }),
  )
  const firstRequest = new Map<number, number>()
  const routers: Router[] = Array.from({ length: WORKERS }, () =>
    startRouter({
      models: files,
      slots: SLOTS,
      latencyMs: LATENCY_MS,
      loadMs: LOAD_MS,
      onRequest: (_model, body) => {
        const k = Number(/^b(\d+) /.exec(String(body?.messages?.[0]?.content ?? ''))?.[1])
        if (!firstRequest.has(k)) firstRequest.set(k, performance.now())
      },
    }),
  )
  let server: Bench | null = null
  const daemons: ReturnType<typeof Bun.spawn>[] = []
  try {
    server = await benchServer({
      CATALOGUE_PATH: manifest,
      LOG_LEVEL: 'error',
      PLACEMENT: placement,
      PLACEMENT_MAX_WAIT_SECONDS: String(MAX_WAIT_S),
    })
    const s = server
    const { access_token: token } = await json(
      await fetch(`${s.url}/v1/auth/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: 'bench@example.test', password: 'bench-password' }),
      }),
    )
    routers.forEach((r, i) => {
      daemons.push(
        Bun.spawn(
          [
            'bun',
            join(import.meta.dir, '../src/cli.ts'),
            'worker',
            '--server',
            s.url,
            '--runtime',
            'llama.cpp',
            '--runtime-url',
            r.url,
            '--name',
            `placement-${i}`,
            // Room for one model of the three (vram_gb 8 each), as the router holds one at a time.
            '--vram-gb',
            '10',
            '--state-dir',
            join(dir, `worker-${i}`),
            '--log-level',
            process.env.BENCH_TRACE ? 'info' : 'warn',
          ],
          {
            env: { ...process.env, GRIDKEEP_WORKER_KEY: s.key },
            stdout: process.env.BENCH_TRACE ? 'inherit' : 'ignore',
            stderr: 'inherit',
          },
        ),
      )
    })
    // Every daemon registered, its models hashed and advertised, and idle: its poll held.
    while (s.deps.pollWaiters.size < WORKERS) await Bun.sleep(20)

    // The input files first: creating a batch is what the clock counts from.
    const inputs = await Promise.all(
      plan.map(async (p) => {
        const lines = Array.from({ length: p.requests }, (_, i) =>
          JSON.stringify({
            custom_id: `r${i}`,
            body: { model: slug(p.model), messages: [{ role: 'user', content: `b${p.k} r${i}` }] },
          }),
        )
        const form = new FormData()
        form.append('purpose', 'batch')
        form.append('file', new Blob([`${lines.join('\n')}\n`]), `b${p.k}.jsonl`)
        return (
          await json(
            await fetch(`${s.url}/v1/files`, {
              method: 'POST',
              headers: { authorization: `Bearer ${token}` },
              body: form,
            }),
          )
        ).id as string
      }),
    )
    const created = new Map<number, number>()
    const ids: string[] = []
    const t0 = performance.now()
    for (const p of plan) {
      const wait = t0 + p.atMs - performance.now()
      if (wait > 0) await Bun.sleep(wait)
      created.set(p.k, performance.now())
      const batch = await json(
        await fetch(`${s.url}/v1/batches`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            input_file_id: inputs[p.k],
            endpoint: '/v1/chat/completions',
            completion_window: '24h',
          }),
        }),
      )
      ids.push(batch.id)
    }
    const open = s.deps.sqlite.query<{ n: number; failed: number }, []>(
      `SELECT count(*) FILTER (WHERE status NOT IN ('completed', 'failed')) AS n,
         count(*) FILTER (WHERE status = 'failed') AS failed FROM batches`,
    )
    for (;;) {
      const { n, failed } = open.get()!
      if (failed) throw new Error(`${failed} batch(es) failed`)
      if (n === 0) break
      await Bun.sleep(20)
    }
    const makespanS = (performance.now() - t0) / 1000
    if (process.env.BENCH_LOADS)
      for (const [i, r] of routers.entries()) {
        const loads = r.history.map((h) => `${((h.ms - t0) / 1000).toFixed(1)} s ${h.model}`)
        console.log(`${label} worker ${i}: ${loads.join(', ')}`)
      }
    const waits: Record<string, number> = {}
    for (const p of plan) {
      const waited = (firstRequest.get(p.k)! - created.get(p.k)!) / 1000
      waits[p.model] = Math.max(waits[p.model] ?? 0, waited)
    }
    return { makespanS, loads: routers.reduce((n, r) => n + r.loads, 0), waits }
  } finally {
    for (const d of daemons) d.kill('SIGKILL')
    await Promise.all(daemons.map((d) => d.exited))
    await server?.stop()
    for (const r of routers) await r.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

const workloads = (['mixed', 'late'] as const).filter(
  (w) => !process.env.BENCH_WORKLOAD || process.env.BENCH_WORKLOAD === w,
)
const modes = (['loaded_first', 'queue'] as const).filter(
  (m) => !process.env.BENCH_ONLY || process.env.BENCH_ONLY === m,
)
const total = workload('mixed').reduce((n, p) => n + p.requests, 0)
const nominal = total / FLEET_RATE + LOAD_MS / 1000
// Every model loaded on as many workers as its share of the requests needs, rounded up: the loads
// of a fleet that runs every model at its share at once (fewer leave a model short of workers).
const fewestLoads = MODELS.reduce((n, m) => n + Math.ceil(WORKERS * m.share), 0)
console.log(
  `placement: ${WORKERS} daemons (one-model engines, ${SLOTS} slots × ${LATENCY_MS} ms, ${LOAD_MS / 1000} s a load), ` +
    `${workload('mixed').length} batches, ${total} requests (${MODELS.map((m) => `${m.name} ${Math.round(m.share * 100)} %`).join(', ')}), ` +
    `${BACKLOG * 100} % waiting at the start, the rest arriving over ${ARRIVE_S} s (late: charlie none at the start, ` +
    `all in the second half); PLACEMENT_MAX_WAIT_SECONDS=${MAX_WAIT_S}`,
)

// The plans that knew the arrivals, on the idealised fleet, and their own lower bound (the bound's
// workload planned the same way: every worker on alpha from the start).
const idealFleet = { workers: WORKERS, rate: FLEET_RATE / WORKERS, loadS: LOAD_MS / 1000 }
const planBound = Math.min(...clairvoyantPlans(workload('mixed', 'alpha'), idealFleet).byLoads)
const plans = new Map(workloads.map((w) => [w, clairvoyantPlans(workload(w), idealFleet)]))

/**
 * The plan a live run is weighed against: the fewest loads of a plan whose makespan ÷ its bound is
 * at most the run's makespan ÷ its bound; when no plan is that fast, the fastest plan.
 */
function reference(p: Plans, ratio: number) {
  const ratios = p.byLoads.map((m) => m / planBound)
  const loads = ratios.findIndex((r) => r <= ratio)
  const best = loads >= 0 ? loads : ratios.indexOf(Math.min(...ratios))
  return { loads: best, ratio: ratios[best]!, how: p.how[best]! }
}

// The lower bound as this machine runs it: the same batches, all of alpha, all waiting at the start.
const bound = (await run('queue', workload('mixed', 'alpha'), 'lower bound')).makespanS
const results = new Map<Workload, Partial<Record<Mode, Result>>>()
for (const w of workloads) {
  const byMode: Partial<Record<Mode, Result>> = {}
  for (const m of modes) byMode[m] = await run(m, workload(w), `${w} ${m}`)
  results.set(w, byMode)
}
// The straggler case (docs/api.md §16 backup copies): bench/fleet.ts (e), in its own process, under
// the rules before placement (no backup copies: the dead worker's shard waits for the sweeper) and
// with it.
const straggler: Partial<Record<Mode, string>> = {}
if (!process.env.BENCH_NO_STRAGGLER)
  for (const m of modes) {
    const env = m === 'loaded_first' ? 'PLACEMENT=loaded_first,SHARD_BACKUPS=false' : 'PLACEMENT=queue'
    const proc = Bun.spawn(['bun', join(import.meta.dir, 'fleet.ts')], {
      env: { ...process.env, BENCH_ONLY: 'e', BENCH_RUNS: '1', BENCH_SERVER_ENV: env },
      stdout: 'pipe',
      stderr: 'ignore',
    })
    const out = await new Response(proc.stdout).text()
    await proc.exited
    const ratio = /crash \/ no crash = ([\d.]+)×/.exec(out)?.[1]
    straggler[m] = ratio ? `${ratio}×` : 'not measured'
  }

const widths = [48, 30, 30]
const line = (cells: string[]) =>
  console.log(cells.map((c, i) => (i < widths.length ? c.padEnd(widths[i]!) : c)).join(''))
const header = (title: string) => line([title, 'loaded_first (no placement)', 'queue (placement)', 'goal'])
for (const w of workloads) {
  const byMode = results.get(w)!
  const ratio = (r: Result) => r.makespanS / bound
  const rows: [string, (r: Result) => string, string][] = [
    [
      `makespan ÷ lower bound (${bound.toFixed(1)} s; nominal ${nominal.toFixed(1)} s)`,
      (r) => `${ratio(r).toFixed(2)} (${r.makespanS.toFixed(1)} s)`,
      '≤ 1.15',
    ],
    [`loads ÷ fewest (${fewestLoads})`, (r) => `${(r.loads / fewestLoads).toFixed(2)} (${r.loads})`, '≤ 1.5'],
    [
      "loads ÷ the plan's (its loads at its makespan)",
      (r) => {
        const p = reference(plans.get(w)!, ratio(r))
        return `${(r.loads / p.loads).toFixed(2)} (${r.loads} vs ${p.loads} at ${p.ratio.toFixed(2)})`
      },
      '≤ 1.25',
    ],
    [
      'longest wait, creation → first request',
      (r) => `${longest(r)[1].toFixed(1)} s (${longest(r)[0]})`,
      `≤ ${MAX_WAIT_S + LOAD_MS / 1000} s (aging + one load)`,
    ],
    [
      '  per model: alpha / bravo / charlie',
      (r) => MODELS.map((m) => (r.waits[m.name] ?? 0).toFixed(1)).join(' / '),
      '',
    ],
  ]
  header(`${w} workload`)
  for (const [label, f, goal] of rows)
    line([label, ...(['loaded_first', 'queue'] as const).map((m) => (byMode[m] ? f(byMode[m]!) : '—')), goal])
  if (process.env.BENCH_LOADS)
    for (const m of modes) {
      const p = reference(plans.get(w)!, ratio(byMode[m]!))
      console.log(`  the plan for ${m}'s makespan: ${p.how.map((h, i) => `worker ${i}: ${h}`).join('; ')}`)
    }
}
// The late arrivals' goal (docs/api.md §7 Placement): loads within 1.25× of the plan that knew the
// arrivals, without raising the makespan (÷ its lower bound, ≤ 1.15; and ÷ the plan's own at those
// loads, printed beside it).
const late = results.get('late')?.queue
if (late) {
  const ratio = late.makespanS / bound
  const p = reference(plans.get('late')!, ratio)
  const loads = late.loads / p.loads
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met')
  console.log(
    `late arrivals, placement: loads ÷ the plan that knew them ${loads.toFixed(2)}× (${late.loads} vs ${p.loads}; goal ≤ 1.25×: ${verdict(loads <= 1.25)}); ` +
      `makespan ÷ lower bound ${ratio.toFixed(2)} (goal ≤ 1.15: ${verdict(ratio <= 1.15)}), ÷ the plan's at its loads ${(ratio / p.ratio).toFixed(2)}×`,
  )
}
if (!process.env.BENCH_NO_STRAGGLER) {
  header('')
  line([
    'straggler: crash ÷ no crash (bench/fleet.ts e)',
    straggler.loaded_first ?? '—',
    straggler.queue ?? '—',
    '≤ 1.5×',
  ])
}
