import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fetchEngine, startLlamaServer, writeTinyModel } from '../scripts/llama-server'
import { benchServer } from './lib/fixture'

// A real engine end to end. llama.cpp's llama-server (scripts/llama-server.ts, the tiny
// model) answers N chat requests twice, at the same concurrency:
//   direct  a bare loop of concurrent fetches straight to llama-server, in its own process like the
//           daemon (the baseline);
//   batch   the same N requests as one batch through gridkeep (in this process) and the daemon
//           (`gridkeep worker`, its own process, idle and holding a poll before the batch exists),
//           timed from POST /v1/batches to `completed` (validation, claim, download, run, upload).
// Prints both times and the ratio direct/batch (goal ≥ 0.9).
//
//   bun run bench/llama.ts                      1,000 requests at concurrency 8
//   BENCH_LINES=N BENCH_CONCURRENCY=N BENCH_SLOTS=N   other sizes (slots: llama-server --parallel)
//   BENCH_SWEEP=1                               instead: the daemon at --concurrency auto against
//                                               each fixed concurrency of 1, 2, 4, 8, 16
//                                               (auto within 10 % of the best fixed one)

const LINES = Number(process.env.BENCH_LINES ?? 1_000)
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8)
const SLOTS = Number(process.env.BENCH_SLOTS ?? 4)
const SLUG = 'gridkeep-tiny-f32'
const ALIAS = 'gridkeep-tiny'

const body = (i: number, model: string) => ({
  model,
  messages: [{ role: 'user', content: `Summarise item ${i} in a few words.` }],
  max_tokens: 16,
  temperature: 0,
})

async function direct(url: string, n: number): Promise<number> {
  let next = 0
  const worker = async () => {
    while (next < n) {
      const i = next++
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body(i, ALIAS)),
      })
      await res.text()
      if (!res.ok) throw new Error(`llama-server answered ${res.status}`)
    }
  }
  const t0 = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return (performance.now() - t0) / 1000
}

async function json(res: Response) {
  const b = (await res.json()) as any
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(b)}`)
  return b
}

async function batch(
  dir: string,
  llamaUrl: string,
  digest: string,
  concurrency: string = String(CONCURRENCY),
): Promise<{ secs: number; jobSecs?: number }> {
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    [
      'models:',
      `  - id: ${SLUG}`,
      '    task_type: chat',
      '    quantization: F32',
      '    vram_gb: 1',
      `    digest: sha256:${digest}`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${ALIAS}`,
    ].join('\n'),
  )
  const server = await benchServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'error' })
  const api = (path: string, init: RequestInit & { token?: string } = {}) =>
    fetch(server.url + path, {
      ...init,
      headers: {
        ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
        ...(typeof init.body === 'string' ? { 'content-type': 'application/json' } : {}),
      },
    })
  const daemon = Bun.spawn(
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
      llamaUrl,
      '--concurrency',
      concurrency,
      '--vram-gb',
      '24',
      '--state-dir',
      join(dir, 'worker'),
      '--log-level',
      'info',
    ],
    { env: { ...process.env, GRIDKEEP_WORKER_KEY: server.key }, stdout: 'pipe', stderr: 'inherit' },
  )
  const logs = new Response(daemon.stdout).text()
  let secs = 0
  try {
    const { access_token: token } = await json(
      await api('/v1/auth/login', {
        method: 'POST',
        body: JSON.stringify({ email: 'bench@example.test', password: 'bench-password' }),
      }),
    )
    const lines = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({ custom_id: `req-${i}`, body: body(i, SLUG) }),
    )
    const form = new FormData()
    form.append('purpose', 'batch')
    form.append('file', new Blob([`${lines.join('\n')}\n`]), 'input.jsonl')
    const file = await json(await api('/v1/files', { method: 'POST', token, body: form }))
    // The daemon is registered and idle: its poll is held by the server.
    while (server.deps.pollWaiters.size === 0) await Bun.sleep(10)

    const t0 = performance.now()
    const created = await json(
      await api('/v1/batches', { method: 'POST', token, body: JSON.stringify({ input_file_id: file.id }) }),
    )
    const status = server.deps.sqlite.query<{ status: string; completed: number }, [string]>(
      'select status, request_counts_completed as completed from batches where id = ?',
    )
    for (;;) {
      const row = status.get(created.id)!
      if (row.status === 'completed' || row.status === 'failed') {
        secs = (performance.now() - t0) / 1000
        if (row.status !== 'completed' || row.completed !== LINES)
          throw new Error(`batch ended ${row.status} with ${row.completed}/${LINES} completed`)
        break
      }
      await Bun.sleep(10)
    }
  } finally {
    daemon.kill('SIGTERM')
    await daemon.exited
    await server.stop()
  }
  // The daemon's own account of the job: claim to upload (its JSON log line).
  const job = (await logs)
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))
    .find((l) => l.msg === 'job completed')
  return { secs, jobSecs: job?.seconds }
}

/** The direct loop in its own process, as the daemon runs in its own: the two compete alike. */
async function directProcess(url: string, n: number): Promise<number> {
  const proc = Bun.spawn(['bun', import.meta.path, '--direct', url, String(n)], {
    env: { ...process.env, BENCH_CONCURRENCY: String(CONCURRENCY) },
    stdout: 'pipe',
    stderr: 'inherit',
  })
  const out = await new Response(proc.stdout).text()
  if ((await proc.exited) !== 0) throw new Error('the direct loop failed')
  return Number(out.trim())
}

if (process.argv[2] === '--direct') {
  console.log(await direct(process.argv[3]!, Number(process.argv[4])))
  process.exit(0)
}

const fetched = fetchEngine()
if (!fetched.ok) {
  console.log(`not run: llama-server unavailable: ${fetched.reason}`)
  process.exit(1)
}
const dir = mkdtempSync(join(tmpdir(), 'gk-bench-llama-'))
const modelPath = await writeTinyModel()
const digest = new Bun.CryptoHasher('sha256').update(await Bun.file(modelPath).bytes()).digest('hex')
// Every run does the same work: no prompt cache (a prompt seen before would be cheaper the second
// time, favouring whichever run came later) and every answer exactly max_tokens long.
const llama = await startLlamaServer({
  engine: fetched.engine,
  modelPath,
  alias: ALIAS,
  slots: SLOTS,
  extraArgs: ['--no-cache-prompt', '--cache-ram', '0', '--ignore-eos'],
})
try {
  // Warm the engine and the connection pool before measuring.
  await directProcess(llama.url, 200)
  if (process.env.BENCH_SWEEP) {
    // Each setting twice, in interleaved rounds (the machine is shared): the better of its two runs.
    const settings = ['auto', '1', '2', '4', '8', '16']
    const best = new Map<string, number>()
    for (let round = 0; round < 2; round++) {
      for (const c of settings) {
        const runDir = join(dir, `${c}-${round}`)
        mkdirSync(runDir)
        const { jobSecs, secs } = await batch(runDir, llama.url, digest, c)
        const rps = LINES / (jobSecs ?? secs)
        best.set(c, Math.max(best.get(c) ?? 0, rps))
      }
    }
    const fixed = settings.slice(1).map((c) => [c, best.get(c)!] as const)
    const [bestC, bestRps] = fixed.reduce((a, b) => (b[1] > a[1] ? b : a))
    const auto = best.get('auto')!
    console.log(
      `${LINES} chat requests per run, llama-server with ${SLOTS} slots, the daemon's job (claim → upload):`,
    )
    console.log(`  fixed: ${fixed.map(([c, r]) => `${c} → ${r.toFixed(0)} req/s`).join(', ')}`)
    console.log(
      `  auto → ${auto.toFixed(0)} req/s = ${((auto / bestRps) * 100).toFixed(0)} % of the best fixed (${bestC}; goal ≥ 90 %)`,
    )
    process.exit(0)
  }
  // The baseline is run before and after the batch (the machine is shared): their mean is compared.
  const before = await directProcess(llama.url, LINES)
  const { secs: batchSecs, jobSecs } = await batch(dir, llama.url, digest)
  const after = await directProcess(llama.url, LINES)
  const directSecs = (before + after) / 2
  console.log(`${LINES} chat requests at concurrency ${CONCURRENCY}, llama-server with ${SLOTS} slots`)
  console.log(
    `direct to llama-server (baseline)   ${directSecs.toFixed(2)} s  ${Math.round(LINES / directSecs)} req/s` +
      `  (before ${before.toFixed(2)} s, after ${after.toFixed(2)} s)`,
  )
  console.log(
    `batch through gridkeep + daemon     ${batchSecs.toFixed(2)} s  ${Math.round(LINES / batchSecs)} req/s`,
  )
  if (jobSecs) console.log(`  of which the daemon's job           ${jobSecs.toFixed(2)} s  (claim → upload)`)
  const ratio = directSecs / batchSecs
  console.log(
    `ratio direct/batch                  ${ratio.toFixed(2)}  (goal ≥ 0.9: ${ratio >= 0.9 ? 'met' : 'MISSED'})`,
  )
} finally {
  await llama.stop()
  rmSync(dir, { recursive: true, force: true })
}
