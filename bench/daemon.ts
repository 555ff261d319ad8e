import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../src/config'
import { executeJob } from '../src/daemon/executor'
import { startServer } from '../src/index'
import { setLogLevel } from '../src/lib/logger'

// Daemon throughput benchmark. A stand-in runtime that answers at once runs in its own
// process. The daemon (`gridkeep worker`, its own process) registers with a real gridkeep server
// (in this process), claims one batch and runs it at concurrency 64; we time the batch from the
// daemon's start to `completed` and read the daemon's peak RSS (VmHWM). The bare baseline, measured
// in the same run: a loop of 64 concurrent fetches to the same runtime.
//
//   bun run bench/daemon.ts                        50,000 lines, daemon against the real server
//   BENCH_QUICK=1 bun run bench/daemon.ts          5,000 lines
//   BENCH_MODE=executor bun run bench/daemon.ts    the executor alone, no server (in this process)
//   BENCH_LINES=N  BENCH_CONCURRENCY=N             other sizes

const LINES = Number(process.env.BENCH_LINES ?? (process.env.BENCH_QUICK ? 5_000 : 50_000))
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64)
const MODE = process.env.BENCH_MODE ?? 'daemon'
const SLUG = 'bench-chat-model-q4km'
const RUNTIME_MODEL = 'bench/runtime-model'

const body = (i: number) => ({
  model: SLUG,
  messages: [
    { role: 'system', content: 'You are a terse assistant.' },
    { role: 'user', content: `Summarise item ${i}: ${'lorem ipsum dolor sit amet '.repeat(6)}` },
  ],
  max_tokens: 32,
})

const statusOf = (pid: number | 'self') => readFileSync(`/proc/${pid}/status`, 'utf8')
const kbField = (status: string, field: string) =>
  Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) / 1024

async function startRuntime() {
  const proc = Bun.spawn(['bun', join(import.meta.dir, '../test/helpers/fake-runtime.ts'), RUNTIME_MODEL], {
    stdout: 'pipe',
    stderr: 'inherit',
  })
  const { value } = await proc.stdout.getReader().read()
  const url = new TextDecoder().decode(value).trim().split('\n')[0]!
  return { url, stop: () => proc.kill('SIGTERM') }
}

async function baseline(url: string, n: number): Promise<number> {
  let next = 0
  const worker = async () => {
    while (next < n) {
      const i = next++
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body(i), model: RUNTIME_MODEL }),
      })
      await res.text()
    }
  }
  const t0 = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return n / ((performance.now() - t0) / 1000)
}

async function writeInput(path: string) {
  const sink = Bun.file(path).writer()
  for (let i = 0; i < LINES; i++)
    sink.write(
      JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: body(i) }) +
        '\n',
    )
  await sink.end()
}

async function json(res: Response) {
  const b = (await res.json()) as any
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(b)}`)
  return b
}

/** The daemon against a real server: returns req/s over the whole batch and the daemon's peak RSS. */
async function benchDaemon(dir: string, runtimeUrl: string) {
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    `models:\n  - id: ${SLUG}\n    task_type: chat\n    quantization: Q4_K_M\n    vram_gb: 4\n    serving_profiles:\n      - runtime: openai\n        runtime_model_id: ${RUNTIME_MODEL}\n`,
  )
  const config = loadConfig({
    DATA_DIR: join(dir, 'server'),
    PORT: '0',
    HOST: '127.0.0.1',
    JWT_SECRET: 'bench-secret-bench-secret-bench-secret-0123',
    ADMIN_PASSWORD: 'bench-admin-password',
    LOG_LEVEL: 'error',
    CATALOGUE_PATH: manifest,
  })
  const server = await startServer(config)
  setLogLevel('error')
  const api = (path: string, init: RequestInit & { token?: string } = {}) =>
    fetch(server.url + path, {
      ...init,
      headers: {
        ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
        ...(typeof init.body === 'string' ? { 'content-type': 'application/json' } : {}),
      },
    })
  try {
    const creds = { email: 'bench@example.test', password: 'bench-password-1' }
    await json(
      await api('/v1/auth/signup', {
        method: 'POST',
        body: JSON.stringify({ ...creds, full_name: 'Bench' }),
      }),
    )
    const { access_token: token } = await json(
      await api('/v1/auth/login', { method: 'POST', body: JSON.stringify(creds) }),
    )
    const orgs = await json(await api('/v1/orgs', { token }))
    const { key } = await json(
      await api(`/v1/orgs/${orgs.data[0].id}/api-keys`, {
        method: 'POST',
        token,
        body: JSON.stringify({ name: 'bench' }),
      }),
    )
    const input = join(dir, 'input.jsonl')
    await writeInput(input)
    const form = new FormData()
    form.append('purpose', 'batch')
    form.append('file', Bun.file(input), 'input.jsonl')
    const file = await json(await api('/v1/files', { method: 'POST', token, body: form }))
    const created = await json(
      await api('/v1/batches', { method: 'POST', token, body: JSON.stringify({ input_file_id: file.id }) }),
    )
    const batch = async () => json(await api(`/v1/batches/${created.id}`, { token }))
    while ((await batch()).status === 'validating') await Bun.sleep(50)

    const t0 = performance.now()
    const daemon = Bun.spawn(
      [
        'bun',
        join(import.meta.dir, '../src/daemon/cli.ts'),
        '--server',
        server.url,
        '--runtime',
        'openai',
        '--runtime-url',
        runtimeUrl,
        '--concurrency',
        String(CONCURRENCY),
        '--vram-gb',
        '24',
        '--poll-interval',
        '0.1',
        '--state-dir',
        join(dir, 'worker'),
        '--log-level',
        'info',
      ],
      { env: { ...process.env, GRIDKEEP_WORKER_KEY: key }, stdout: 'pipe', stderr: 'inherit' },
    )
    let done: any
    const trace: string[] = []
    for (;;) {
      if (process.env.BENCH_TRACE)
        trace.push(
          `${((performance.now() - t0) / 1000).toFixed(1)}s ${kbField(statusOf(daemon.pid), 'VmRSS').toFixed(0)}MB`,
        )
      done = await batch()
      if (done.status === 'completed' || done.status === 'failed') break
      await Bun.sleep(20)
    }
    const secs = (performance.now() - t0) / 1000
    const peak = kbField(statusOf(daemon.pid), 'VmHWM')
    if (trace.length) console.log(trace.join(' '))
    daemon.kill('SIGTERM')
    await daemon.exited
    const logs = (await new Response(daemon.stdout).text())
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l))
    const jobSecs = logs.find((l) => l.msg === 'job completed')?.seconds as number | undefined
    if (done.status !== 'completed' || done.request_counts.completed !== LINES)
      throw new Error(`batch ended ${done.status} with ${JSON.stringify(done.request_counts)}`)
    return { rps: LINES / secs, secs, jobRps: jobSecs ? LINES / jobSecs : null, peak }
  } finally {
    await server.stop()
  }
}

async function benchExecutor(dir: string, runtimeUrl: string) {
  const input = join(dir, 'input.jsonl')
  await writeInput(input)
  Bun.gc(true)
  // Linux: writing 5 to clear_refs resets the peak-RSS mark, so the peak measured is the job's own.
  writeFileSync('/proc/self/clear_refs', '5')
  const t0 = performance.now()
  const counts = await executeJob(
    input,
    join(dir, 'output.jsonl'),
    { model: RUNTIME_MODEL, endpoint: '/v1/chat/completions' },
    {
      runtimeUrl,
      concurrency: CONCURRENCY,
      tries: 3,
      requestTimeoutMs: 60_000,
      backoff: { baseMs: 100, maxMs: 2000 },
    },
  )
  const secs = (performance.now() - t0) / 1000
  if (counts.completed !== LINES) throw new Error(`only ${counts.completed}/${LINES} completed`)
  return { rps: LINES / secs, secs, jobRps: null, peak: kbField(statusOf('self'), 'VmHWM') }
}

const dir = mkdtempSync(join(tmpdir(), 'gk-bench-'))
const rt = await startRuntime()
try {
  // Warm the runtime and the connection pool before measuring.
  await baseline(rt.url, 2_000)
  const baseRps = await baseline(rt.url, LINES)
  const r = MODE === 'executor' ? await benchExecutor(dir, rt.url) : await benchDaemon(dir, rt.url)
  const what = MODE === 'executor' ? 'executor alone' : 'daemon vs real server'
  console.log(`mode                         ${what}; ${LINES} lines at concurrency ${CONCURRENCY}`)
  console.log(`baseline (bare fetch loop)   ${Math.round(baseRps)} req/s`)
  console.log(`${MODE.padEnd(29)}${Math.round(r.rps)} req/s  (${r.secs.toFixed(2)} s end to end)`)
  if (r.jobRps) console.log(`  of which running the job   ${Math.round(r.jobRps)} req/s (download → upload)`)
  console.log(
    `ratio ${MODE}/baseline${' '.repeat(Math.max(1, 14 - MODE.length))}${(r.rps / baseRps).toFixed(2)}`,
  )
  console.log(`peak RSS (${MODE})${' '.repeat(Math.max(1, 18 - MODE.length))}${r.peak.toFixed(0)} MB`)
  console.log(
    `targets: ≥ 2000 req/s ${r.rps >= 2000 ? 'met' : 'MISSED'}; RSS < 150 MB ${r.peak < 150 ? 'met' : 'MISSED'}`,
  )
} finally {
  rt.stop()
  rmSync(dir, { recursive: true, force: true })
}
