import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  fetchEngine,
  type LlamaServer,
  PREFILL,
  startLlamaServer,
  writeTinyModel,
} from '../scripts/llama-server'
import { type Bench, benchServer } from './lib/fixture'

// Execution order by shared prefix (docs/api.md §6 "Execution order", §16 shards), on real
// llama-server processes (scripts/llama-server.ts) serving a generated model large enough that
// prefill dominates a request (PREFILL: 4 layers of width 128; one token a byte). Each case is a
// fresh gridkeep server, fresh engines (no useful cache) and fresh reference daemons (`gridkeep
// worker`, its own process, one engine each), timed from POST /v1/batches to `completed`:
//
//   1. documents × questions, the file question-major; the same lines document-major (the file
//      order) is the baseline: goal ≥ 0.8 of its throughput with PREFIX_ORDER on, one worker and two;
//   2. one shared 1,500-token instruction and a short record a line: goal ≥ 0.95 of the file order;
//   3. no shared prefix: goal ≥ 0.95 of the file order.
//
// Each engine has 2 slots (the daemon's --concurrency 2) and a host prompt cache (--cache-ram) of a
// quarter of workload 1's distinct prefixes (its documents' KV): as a GPU's KV cache holds a few
// hundred of a real model's documents while a real batch has thousands. Printed: requests/s, prompt
// tokens/s, the share of prompt tokens llama-server served from cache (its `timings.cache_n`, or
// `usage.prompt_tokens_details.cached_tokens`, read from the output lines) and the ratios.
//
//   bun run bench/prefix.ts            16 documents × 6 questions; 48 lines for workloads 2 and 3
//   BENCH_QUICK=1 bun run bench/prefix.ts   8 × 4 and 16 lines (smoke run)
//   BENCH_ROUNDS=N                     each case N times, the round of least engine CPU kept

const QUICK = process.env.BENCH_QUICK === '1' || process.argv.includes('--quick')
const DOCS = QUICK ? 8 : 16
const QUESTIONS = QUICK ? 4 : 6
const LINES = QUICK ? 16 : 48
const SLOTS = 2
const SLUG = 'bench-prefill-f32'
const ALIAS = 'bench-prefill'
/** KV cache bytes a token (f16 K and V, every layer): what a cached prefix holds. */
const KV_BYTES_PER_TOKEN = 2 * PREFILL.layers * PREFILL.width * 2
const MiB = 1024 * 1024

// ── the workloads ───────────────────────────────────────────────────────────────────────────────

const WORDS = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india', 'juliet']
/** Text of `chars` characters, different for every seed (no spaces: one token a character). */
function text(seed: number, chars: number): string {
  let s = ''
  let x = seed * 7919 + 1
  while (s.length < chars) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0
    s += `${WORDS[x % WORDS.length]},`
  }
  return s.slice(0, chars)
}

const line = (customId: string, messages: { role: string; content: string }[]) =>
  JSON.stringify({ custom_id: customId, body: { model: SLUG, messages, max_tokens: 1, temperature: 0 } })

const DOC_CHARS = 300
const docLine = (d: number, q: number) =>
  line(`d${d}-q${q}`, [
    { role: 'user', content: `Document ${d}:${text(d, DOC_CHARS)}\nQuestion ${q}:what does it say?` },
  ])

function questionMajor(): string[] {
  const out: string[] = []
  for (let q = 0; q < QUESTIONS; q++) for (let d = 0; d < DOCS; d++) out.push(docLine(d, q))
  return out
}
function documentMajor(): string[] {
  const out: string[] = []
  for (let d = 0; d < DOCS; d++) for (let q = 0; q < QUESTIONS; q++) out.push(docLine(d, q))
  return out
}
const INSTRUCTION = `Instructions:${text(1_000, 1_500)}`
const sharedInstruction = () =>
  Array.from({ length: LINES }, (_, i) =>
    line(`r${i}`, [
      { role: 'system', content: INSTRUCTION },
      { role: 'user', content: `Record ${i}:${text(5_000 + i, 30)}` },
    ]),
  )
const nothingShared = () =>
  Array.from({ length: LINES }, (_, i) =>
    line(`u${i}`, [{ role: 'user', content: `${i}:${text(9_000 + i, 350)}` }]),
  )

// ── one case ────────────────────────────────────────────────────────────────────────────────────

interface Result {
  secs: number
  /** CPU seconds of the busiest engine during the run (see engineCpu). */
  cpu: number
  requests: number
  promptTokens: number
  cachedTokens: number
}

/**
 * CPU seconds a process has used (/proc/<pid>/stat utime + stime, in clock ticks of 1/100 s). An
 * engine runs one compute thread: its CPU time is the time it would take on a machine of its own,
 * whatever else shares this one — the build machine's 2 cores run several jobs at once, which makes
 * wall-clock figures swing by 2× between identical runs.
 */
function cpuSeconds(pid: number): number {
  const stat = require('node:fs').readFileSync(`/proc/${pid}/stat`, 'utf8') as string
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

async function json(res: Response) {
  const b = (await res.json()) as any
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(b)}`)
  return b
}

/** The daemon (`gridkeep worker`) on `engine`, registered and idle once this resolves. */
function startDaemon(server: Bench, engine: LlamaServer, dir: string, name: string) {
  return Bun.spawn(
    [
      'bun',
      join(import.meta.dir, '../src/daemon/cli.ts'),
      '--server',
      server.url,
      '--runtime',
      'openai',
      '--engine',
      'llama.cpp',
      '--runtime-url',
      engine.url,
      '--concurrency',
      String(SLOTS),
      '--vram-gb',
      '24',
      '--name',
      name,
      '--state-dir',
      join(dir, name),
      '--log-level',
      'warn',
    ],
    {
      env: { ...process.env, GRIDKEEP_WORKER_KEY: server.key, GRIDKEEP_POLL_INTERVAL: '0.05' },
      stdout: 'ignore',
      stderr: 'ignore',
    },
  )
}

/** Each case BENCH_ROUNDS times (default 1): the round whose busiest engine used the least CPU. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1)

async function runCase(
  o: { lines: string[]; prefixOrder: boolean; workers: number },
  model: { path: string; digest: string; cacheRamMiB: number },
): Promise<Result> {
  let best: Result | null = null
  for (let r = 0; r < ROUNDS; r++) {
    const got = await runOnce(o, model)
    if (!best || got.cpu < best.cpu) best = got
  }
  return best!
}

async function runOnce(
  o: { lines: string[]; prefixOrder: boolean; workers: number },
  model: { path: string; digest: string; cacheRamMiB: number },
): Promise<Result> {
  const fetched = fetchEngine()
  if (!fetched.ok) throw new Error(fetched.reason)
  const dir = mkdtempSync(join(tmpdir(), 'gk-bench-prefix-'))
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    [
      'models:',
      `  - id: ${SLUG}`,
      '    task_type: chat',
      '    quantization: F32',
      '    vram_gb: 1',
      `    digest: sha256:${model.digest}`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${ALIAS}`,
    ].join('\n'),
  )
  const server = await benchServer({
    CATALOGUE_PATH: manifest,
    LOG_LEVEL: 'error',
    PREFIX_ORDER: String(o.prefixOrder),
    // Shards for one worker and two alike (docs/api.md §16): a batch of these sizes is split.
    SHARD_MIN_REQUESTS: '4',
    SHARD_MAX_REQUESTS: '250',
  })
  const engines: LlamaServer[] = []
  const daemons: ReturnType<typeof startDaemon>[] = []
  try {
    for (let i = 0; i < o.workers; i++) {
      engines.push(
        await startLlamaServer({
          engine: fetched.engine,
          modelPath: model.path,
          alias: ALIAS,
          slots: SLOTS,
          contextPerSlot: 2_048,
          threads: 1,
          extraArgs: ['--cache-ram', String(model.cacheRamMiB)],
        }),
      )
    }
    for (const [i, engine] of engines.entries()) daemons.push(startDaemon(server, engine, dir, `gpu-${i}`))
    const api = (path: string, init: RequestInit & { token?: string } = {}) =>
      fetch(server.url + path, {
        ...init,
        headers: {
          ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
          ...(typeof init.body === 'string' ? { 'content-type': 'application/json' } : {}),
        },
      })
    const { access_token: token } = await json(
      await api('/v1/auth/login', {
        method: 'POST',
        body: JSON.stringify({ email: 'bench@example.test', password: 'bench-password' }),
      }),
    )
    const form = new FormData()
    form.append('purpose', 'batch')
    form.append('file', new Blob([`${o.lines.join('\n')}\n`]), 'input.jsonl')
    const file = await json(await api('/v1/files', { method: 'POST', token, body: form }))
    // Every daemon registered and idle: its poll is held by the server.
    while (server.deps.pollWaiters.size < o.workers) await Bun.sleep(10)
    const cpu0 = engines.map((e) => cpuSeconds(e.pid))
    const t0 = performance.now()
    const created = await json(
      await api('/v1/batches', { method: 'POST', token, body: JSON.stringify({ input_file_id: file.id }) }),
    )
    let batch: any
    for (;;) {
      batch = await json(await api(`/v1/batches/${created.id}`, { token }))
      if (batch.status === 'completed' || batch.status === 'failed') break
      await Bun.sleep(20)
    }
    const secs = (performance.now() - t0) / 1000
    const cpu = Math.max(...engines.map((e, i) => cpuSeconds(e.pid) - cpu0[i]!))
    if (batch.status !== 'completed' || batch.request_counts.completed !== o.lines.length)
      throw new Error(
        `batch ended ${batch.status}: ${JSON.stringify(batch.request_counts)} ${batch.error ?? ''}`,
      )
    const output = await (await api(`/v1/files/${batch.output_file_id}/content`, { token })).text()
    let promptTokens = 0
    let cachedTokens = 0
    for (const l of output.split('\n')) {
      if (!l) continue
      const body = JSON.parse(l).response.body
      promptTokens += body.usage.prompt_tokens
      cachedTokens += body.usage.prompt_tokens_details?.cached_tokens ?? body.timings?.cache_n ?? 0
    }
    return { secs, cpu, requests: o.lines.length, promptTokens, cachedTokens }
  } finally {
    for (const d of daemons) d.kill('SIGTERM')
    await Promise.all(daemons.map((d) => d.exited))
    await Promise.all(engines.map((e) => e.stop()))
    await server.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

// ── the run ─────────────────────────────────────────────────────────────────────────────────────

const fetched = fetchEngine()
if (!fetched.ok) {
  console.log(`not run: llama-server unavailable: ${fetched.reason}`)
  process.exit(1)
}
const path = await writeTinyModel(join(tmpdir(), 'gridkeep-bench-prefill.gguf'), 20_261_124, PREFILL)
const digest = new Bun.CryptoHasher('sha256').update(await Bun.file(path).bytes()).digest('hex')
// Workload 1's distinct prefixes: its documents (about one token a character, and the template).
const docTokens = DOC_CHARS + 40
const cacheRamMiB = Math.max(1, Math.round((DOCS * docTokens * KV_BYTES_PER_TOKEN) / 4 / MiB))
const model = { path, digest, cacheRamMiB }

const row = (label: string, r: Result, ratio?: { of: Result; goal: number; name: string }) => {
  const cells = [
    label.padEnd(46),
    `${(r.requests / r.cpu).toFixed(2).padStart(6)} req/s`,
    `${Math.round(r.promptTokens / r.cpu)
      .toString()
      .padStart(5)} prompt tok/s`,
    `cached ${((100 * r.cachedTokens) / Math.max(1, r.promptTokens)).toFixed(0).padStart(3)} %`,
    `(wall ${r.secs.toFixed(1)} s, ${(r.requests / r.secs).toFixed(2)} req/s)`,
  ]
  if (ratio) {
    const value = ratio.of.cpu / r.cpu
    const wall = ratio.of.secs / r.secs
    cells.push(
      `${value.toFixed(2)} of ${ratio.name}` +
        (ratio.goal ? ` (goal ≥ ${ratio.goal}: ${value >= ratio.goal ? 'met' : 'MISSED'})` : '') +
        ` [wall ${wall.toFixed(2)}]`,
    )
  }
  console.log(`  ${cells.join('  ')}`)
}

console.log(
  `llama-server × ${SLOTS} slots a worker, 1 thread, --cache-ram ${cacheRamMiB} MiB (a quarter of workload 1's ` +
    `${DOCS} documents at ${(KV_BYTES_PER_TOKEN / 1024).toFixed(0)} KiB of KV a token); model ${PREFILL.layers} layers × ${PREFILL.width}${QUICK ? ' [quick]' : ''}`,
)
console.log(
  'Throughput per CPU-second of the busiest engine (wall-clock figures beside them: this machine is shared)',
)
console.log(`\n1. documents × questions: ${DOCS} × ${QUESTIONS} = ${DOCS * QUESTIONS} requests`)
for (const workers of [1, 2]) {
  const base = await runCase({ lines: documentMajor(), prefixOrder: false, workers }, model)
  row(`${workers} worker${workers > 1 ? 's' : ' '}  document-major, file order`, base)
  const off = await runCase({ lines: questionMajor(), prefixOrder: false, workers }, model)
  row(`${workers} worker${workers > 1 ? 's' : ' '}  question-major, PREFIX_ORDER=false`, off, {
    of: base,
    goal: 0,
    name: 'document-major',
  })
  const on = await runCase({ lines: questionMajor(), prefixOrder: true, workers }, model)
  row(`${workers} worker${workers > 1 ? 's' : ' '}  question-major, prefix order`, on, {
    of: base,
    goal: 0.8,
    name: 'document-major',
  })
}
for (const [n, name, lines] of [
  [2, `one shared 1,500-token instruction + a short record: ${LINES} requests`, sharedInstruction()],
  [3, `no shared prefix: ${LINES} requests`, nothingShared()],
] as const) {
  console.log(`\n${n}. ${name}`)
  const off = await runCase({ lines: [...lines], prefixOrder: false, workers: 1 }, model)
  row('1 worker   PREFIX_ORDER=false', off)
  const on = await runCase({ lines: [...lines], prefixOrder: true, workers: 1 }, model)
  row('1 worker   prefix order', on, { of: off, goal: 0.95, name: 'file order' })
}
