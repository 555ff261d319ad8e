import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { executeJob } from '../src/daemon/executor'

// Daemon throughput benchmark (issue 5): one job at concurrency 64 against a stand-in runtime that
// answers at once (in its own process), compared with a bare baseline measured in the same run: a
// loop of 64 concurrent fetches to the same runtime. Prints req/s, peak RSS and the ratio.
//
//   bun run bench/daemon.ts                 50,000 lines
//   BENCH_QUICK=1 bun run bench/daemon.ts   5,000 lines
//   BENCH_LINES=N, BENCH_CONCURRENCY=N      other sizes

const LINES = Number(process.env.BENCH_LINES ?? (process.env.BENCH_QUICK ? 5_000 : 50_000))
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64)
const MODEL = 'bench-model'

const body = (i: number) => ({
  model: 'catalogue-slug',
  messages: [
    { role: 'system', content: 'You are a terse assistant.' },
    { role: 'user', content: `Summarise item ${i}: ${'lorem ipsum dolor sit amet '.repeat(6)}` },
  ],
  max_tokens: 32,
})

// Linux: writing 5 to clear_refs resets the peak-RSS mark, so the peak measured is the job's own.
function resetPeak() {
  try {
    writeFileSync('/proc/self/clear_refs', '5')
  } catch {}
}

function vmHwmMb(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))
  return m ? Number(m[1]) / 1024 : process.memoryUsage().rss / 1e6
}

async function startRuntime() {
  const proc = Bun.spawn(['bun', join(import.meta.dir, '../test/helpers/fake-runtime.ts'), MODEL], {
    stdout: 'pipe',
    stderr: 'inherit',
  })
  const reader = proc.stdout.getReader()
  const { value } = await reader.read()
  const url = new TextDecoder().decode(value).trim().split('\n')[0]!
  return { url, stop: () => proc.kill('SIGTERM') }
}

async function baseline(url: string, n: number): Promise<number> {
  let next = 0
  const payload = (i: number) => JSON.stringify({ ...body(i), model: MODEL })
  const worker = async () => {
    while (next < n) {
      const i = next++
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: payload(i),
      })
      await res.text()
    }
  }
  const t0 = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return n / ((performance.now() - t0) / 1000)
}

const dir = mkdtempSync(join(tmpdir(), 'gk-bench-'))
const rt = await startRuntime()
try {
  const input = join(dir, 'input.jsonl')
  const output = join(dir, 'output.jsonl')
  const sink = Bun.file(input).writer()
  for (let i = 0; i < LINES; i++)
    sink.write(
      JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: body(i) }) +
        '\n',
    )
  await sink.end()

  // Warm both paths (connection pool, JIT) before measuring.
  await baseline(rt.url, 2_000)
  const baseRps = await baseline(rt.url, LINES)
  Bun.gc(true)
  resetPeak()
  const rssBefore = vmHwmMb()

  const t0 = performance.now()
  const counts = await executeJob(
    input,
    output,
    { model: MODEL, endpoint: '/v1/chat/completions' },
    {
      runtimeUrl: rt.url,
      concurrency: CONCURRENCY,
      tries: 3,
      requestTimeoutMs: 60_000,
      backoff: { baseMs: 100, maxMs: 2000 },
    },
  )
  const secs = (performance.now() - t0) / 1000
  const rps = counts.completed / secs
  const peak = vmHwmMb()
  if (counts.completed !== LINES) throw new Error(`only ${counts.completed}/${LINES} completed`)

  console.log(`lines               ${LINES} at concurrency ${CONCURRENCY}`)
  console.log(`baseline (bare fetch loop)   ${Math.round(baseRps)} req/s`)
  console.log(`executor                     ${Math.round(rps)} req/s  (${secs.toFixed(2)} s)`)
  console.log(`ratio executor/baseline      ${(rps / baseRps).toFixed(2)}`)
  console.log(
    `peak RSS                     ${peak.toFixed(0)} MB (before the job: ${rssBefore.toFixed(0)} MB)`,
  )
  console.log(
    `targets: ≥ 2000 req/s ${rps >= 2000 ? 'met' : 'MISSED'}; RSS < 150 MB ${peak < 150 ? 'met' : 'MISSED'}`,
  )
} finally {
  rt.stop()
  rmSync(dir, { recursive: true, force: true })
}
