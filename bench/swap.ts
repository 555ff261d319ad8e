import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fetchEngine, spawnRouter, tinyModel } from '../scripts/llama-server'
import { freePort } from '../src/daemon/engines/child'
import { startStandInHub } from '../test/helpers/hub'
import { downloadCase, mbps } from './download'
import { benchServer } from './lib/fixture'

// Model swaps on a daemon that runs llama.cpp itself (docs/worker.md "Managed engines"): the real
// llama-server router (scripts/llama-server.ts) over two tiny models, alpha and beta, with a VRAM
// budget of one model. The daemon (`gridkeep worker --runtime llama.cpp --models-dir`, its own
// process, holding a poll) is handed one-line batches; what is timed is claim → first request (its
// `input downloaded` log line: the input is in and the model is ready):
//   loaded   a batch for the model already loaded;
//   on disk  a batch for the other one: the daemon unloads the loaded model, loads this one.
// Beside them, measured in the same run on a bare router of its own (same binary, same models):
//   the router's own POST /models/unload → unloaded plus POST /models/load → loaded (polled every
//   5 ms), and one chat request's own latency. Goal: within 10 % of bare plus one heartbeat
//   interval (the server hears of a load at the next heartbeat).
// A third case, a model the worker must download first (docs/worker.md "Downloads"): a batch for a
// catalogued model no worker holds, timed from its creation to its first request (the server asks
// the daemon at its next heartbeat, the daemon fetches it from a stand-in hub and verifies it,
// heartbeats, claims and loads it), beside a plain fetch of the same file plus the bare router's own
// unload + load; the server's heartbeat interval is 2 s here (HEARTBEAT_TIMEOUT_SECONDS 8). Then
// the downloader's throughput on a large file vs a plain fetch of it (bench/download.ts, which also
// runs alone). Goals: within 10 % of bare plus one heartbeat interval; ≥ 90 %.
//
//   bun run bench/swap.ts                  5 rounds, a 1 GB download
//   BENCH_ROUNDS=N                         other counts

const ROUNDS = Number(
  process.env.BENCH_ROUNDS ?? (process.env.BENCH_QUICK || process.argv.includes('--quick') ? 2 : 5),
)
const ENTRY = { alpha: 'swap-alpha-f32', beta: 'swap-beta-f32' } as const
type Name = keyof typeof ENTRY
const entryOf = (name: string) => (name in ENTRY ? ENTRY[name as Name] : `swap-${name}-f32`)

const fetched = fetchEngine()
if (!fetched.ok) {
  console.log(`not run: llama-server unavailable: ${fetched.reason}`)
  process.exit(1)
}
const engine = fetched.engine
const dir = mkdtempSync(join(tmpdir(), 'gk-bench-swap-'))
const modelsDir = join(dir, 'models')
mkdirSync(modelsDir)
const digests: Record<string, string> = {}
for (const [name, seed] of [
  ['alpha', 21],
  ['beta', 22],
] as const) {
  const bytes = tinyModel(seed)
  writeFileSync(join(modelsDir, `${name}.gguf`), bytes)
  digests[name] = new Bun.CryptoHasher('sha256').update(bytes).digest('hex')
}
// Models the daemon must download, one a round (and one to warm up), each its own file on the hub.
const hub = startStandInHub()
const HUB_REPO = 'bench/swap-GGUF'
const downloads = Array.from({ length: ROUNDS + 1 }, (_, r) => {
  const bytes = tinyModel(31 + r)
  const { sha256 } = hub.put(HUB_REPO, `dl${r}.gguf`, bytes)
  return { name: `dl${r}`, entry: `swap-dl${r}-f32`, sha256, bytes }
})
const manifest = join(dir, 'models.yaml')
writeFileSync(
  manifest,
  [
    'models:',
    ...(['alpha', 'beta'] as const).flatMap((name) => [
      `  - id: ${ENTRY[name]}`,
      '    task_type: chat',
      '    quantization: F32',
      '    vram_gb: 1',
      `    digest: sha256:${digests[name]}`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${name}`,
    ]),
    ...downloads.flatMap((d) => [
      `  - id: ${d.entry}`,
      '    task_type: chat',
      '    quantization: F32',
      '    vram_gb: 1',
      '    size_gb: 0.001',
      `    digest: sha256:${d.sha256}`,
      '    source_type: huggingface',
      `    source_ref: ${HUB_REPO}/${d.name}.gguf`,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${d.name}`,
    ]),
  ].join('\n'),
)

const HEARTBEAT_S = 2
const server = await benchServer({
  CATALOGUE_PATH: manifest,
  LOG_LEVEL: 'error',
  HEARTBEAT_TIMEOUT_SECONDS: String(4 * HEARTBEAT_S),
})
const api = (path: string, init: RequestInit & { token?: string } = {}) =>
  fetch(server.url + path, {
    ...init,
    headers: {
      ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
      ...(typeof init.body === 'string' ? { 'content-type': 'application/json' } : {}),
    },
  })
async function json(res: Response) {
  const b = (await res.json()) as any
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(b)}`)
  return b
}
const chatBody = (model: string) => ({
  model,
  messages: [{ role: 'user', content: 'Say hello.' }],
  max_tokens: 4,
  temperature: 0,
})

// The daemon, its own process; its JSON log lines are read as they come.
const daemon = Bun.spawn(
  [
    'bun',
    join(import.meta.dir, '../src/cli.ts'),
    'worker',
    '--server',
    server.url,
    '--runtime',
    'llama.cpp',
    '--models-dir',
    modelsDir,
    '--llama-server',
    engine.router,
    '--vram-gb',
    '1',
    '--max-download-gb',
    '1',
    '--hub-url',
    hub.url,
    '--state-dir',
    join(dir, 'worker'),
    '--log-level',
    'info',
  ],
  { env: { ...process.env, GRIDKEEP_WORKER_KEY: server.key }, stdout: 'pipe', stderr: 'inherit' },
)
const ready = new Map<string, number>()
/** When the daemon said a job's first request could go (this process's clock). */
const readyAt = new Map<string, number>()
void (async () => {
  const dec = new TextDecoder()
  let buf = ''
  for await (const chunk of daemon.stdout) {
    buf += dec.decode(chunk)
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl)
      buf = buf.slice(nl + 1)
      try {
        const r = JSON.parse(line)
        if (r.msg === 'input downloaded' && typeof r.ready_seconds === 'number') {
          ready.set(r.job_id, r.ready_seconds)
          readyAt.set(r.job_id, performance.now())
        }
      } catch {}
    }
  }
})()

// The bare router: the same binary over the same models, on a port of its own.
const barePort = freePort()
const bare = spawnRouter(engine, modelsDir, barePort)
const bareUrl = `http://127.0.0.1:${barePort}`

async function bareStatus(name: string): Promise<string | undefined> {
  const list = (await (await bareFetch(`${bareUrl}/models`)).json()) as any
  return list.data.find((m: any) => m.id === name)?.status?.value
}
/**
 * A request to the bare router, sent again on a fresh connection when the router resets a kept-alive
 * one before answering (it does, now and then; the daemon's executor does the same).
 */
async function bareFetch(url: string, init?: RequestInit): Promise<Response> {
  for (let tries = 1; ; tries++) {
    try {
      return await fetch(url, init)
    } catch (e) {
      if (tries >= 3 || (e as { code?: string }).code !== 'ECONNRESET') throw e
    }
  }
}
/** POST /models/<verb> until the model is `until` (polled every 5 ms): seconds. */
async function bareSwitch(verb: 'load' | 'unload', name: string, until: string): Promise<number> {
  const t0 = performance.now()
  const res = await bareFetch(`${bareUrl}/models/${verb}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: name }),
  })
  await res.text()
  while ((await bareStatus(name)) !== until) await Bun.sleep(5)
  return (performance.now() - t0) / 1000
}
async function bareChat(name: string): Promise<number> {
  const t0 = performance.now()
  const res = await bareFetch(`${bareUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(chatBody(name)),
  })
  await res.text()
  if (!res.ok) throw new Error(`bare router answered ${res.status}`)
  return (performance.now() - t0) / 1000
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}
const ms = (s: number) => `${Math.round(s * 1000)} ms`

try {
  const { access_token: token } = await json(
    await api('/v1/auth/login', {
      method: 'POST',
      body: JSON.stringify({ email: 'bench@example.test', password: 'bench-password' }),
    }),
  )
  /** A one-line batch for `name`, created once the daemon is idle and holding a poll; its claim → first request. */
  async function daemonRun(name: string): Promise<number> {
    return (await runBatch(name)).claimToReady
  }
  /** The same, also timed from the batch's creation to its first request. */
  async function runBatch(name: string): Promise<{ claimToReady: number; createToReady: number }> {
    const form = new FormData()
    form.append('purpose', 'batch')
    form.append(
      'file',
      new Blob([`${JSON.stringify({ custom_id: 'q', body: chatBody(entryOf(name)) })}\n`]),
      'in.jsonl',
    )
    const file = await json(await api('/v1/files', { method: 'POST', token, body: form }))
    while (server.deps.pollWaiters.size === 0) await Bun.sleep(5)
    const createdAt = performance.now()
    const created = await json(
      await api('/v1/batches', { method: 'POST', token, body: JSON.stringify({ input_file_id: file.id }) }),
    )
    const status = server.deps.sqlite.query<{ status: string }, [string]>(
      'select status from batches where id = ?',
    )
    for (;;) {
      const row = status.get(created.id)!
      if (row.status === 'failed') throw new Error(`batch ${created.id} failed`)
      if (row.status === 'completed') break
      await Bun.sleep(5)
    }
    while (!ready.has(created.id)) await Bun.sleep(5)
    return {
      claimToReady: ready.get(created.id)!,
      createToReady: (readyAt.get(created.id)! - createdAt) / 1000,
    }
  }
  /** A plain fetch of a download's file from the hub, its bytes kept in memory. */
  async function plainFetch(name: string): Promise<number> {
    const t0 = performance.now()
    const res = await fetch(`${hub.url}/${HUB_REPO}/resolve/main/${name}.gguf`)
    await res.arrayBuffer()
    return (performance.now() - t0) / 1000
  }

  while ((await fetch(`${bareUrl}/models`).catch(() => null))?.ok !== true) await Bun.sleep(20)
  // Warm both: each model loaded once on the daemon and on the bare router; alpha stays loaded.
  await daemonRun('beta')
  await daemonRun('alpha')
  await bareSwitch('load', 'beta', 'loaded')
  await bareChat('beta')
  await bareSwitch('unload', 'beta', 'unloaded')
  await bareSwitch('load', 'alpha', 'loaded')
  await bareChat('alpha')

  const figures = {
    loaded: [] as number[],
    onDisk: [] as number[],
    chat: [] as number[],
    swap: [] as number[],
  }
  let loaded: Name = 'alpha'
  for (let r = 0; r < ROUNDS; r++) {
    // Loaded: the model the last batch used.
    figures.loaded.push(await daemonRun(loaded))
    figures.chat.push(await bareChat(loaded))
    // On disk: the other one; the loaded one makes room.
    const other: Name = loaded === 'alpha' ? 'beta' : 'alpha'
    figures.onDisk.push(await daemonRun(other))
    figures.swap.push(
      (await bareSwitch('unload', loaded, 'unloaded')) + (await bareSwitch('load', other, 'loaded')),
    )
    loaded = other
  }

  // Downloads: each round a model no worker holds yet; the loaded one makes room for it. The
  // bare side: a plain fetch of the same file, then the bare router's unload + load of it.
  await runBatch(downloads[0]!.name)
  await bareSwitch('unload', loaded, 'unloaded')
  await bareFetch(`${bareUrl}/models?reload=1`)
  await bareSwitch('load', downloads[0]!.name, 'loaded')
  let bareLoaded = downloads[0]!.name
  const dl = { daemon: [] as number[], bare: [] as number[] }
  for (const d of downloads.slice(1)) {
    dl.daemon.push((await runBatch(d.name)).createToReady)
    const fetchS = await plainFetch(d.name)
    await bareFetch(`${bareUrl}/models?reload=1`)
    dl.bare.push(
      fetchS +
        (await bareSwitch('unload', bareLoaded, 'unloaded')) +
        (await bareSwitch('load', d.name, 'loaded')),
    )
    bareLoaded = d.name
  }

  const heartbeat = 30
  const line = (what: string, daemonS: number, bareWhat: string, bareS: number, beat = heartbeat) => {
    const goal = 1.1 * bareS + beat
    console.log(
      `  ${what.padEnd(24)} daemon ${ms(daemonS).padStart(7)}   ${bareWhat.padEnd(22)} ${ms(bareS).padStart(7)}   ` +
        `ratio ${(daemonS / bareS).toFixed(2)}  (goal ≤ 1.1 × bare + ${beat} s: ${daemonS <= goal ? 'met' : 'MISSED'})`,
    )
  }
  console.log(
    `claim → first request, median of ${ROUNDS} rounds; llama-server router, two tiny models, VRAM for one`,
  )
  line('model already loaded', median(figures.loaded), 'bare chat request', median(figures.chat))
  line('model on disk (swap)', median(figures.onDisk), 'bare unload + load', median(figures.swap))
  line('model to download', median(dl.daemon), 'fetch + unload + load', median(dl.bare), HEARTBEAT_S)
  console.log(
    `    (created → first request; ${ROUNDS} models of ${(downloads[0]!.bytes.length / 1e6).toFixed(1)} MB, each fetched, verified, claimed and loaded; heartbeat every ${HEARTBEAT_S} s)`,
  )
  const download = await downloadCase({ bytes: ROUNDS < 5 ? 2e8 : 1e9, rounds: ROUNDS })
  console.log(
    `  large download           downloader ${mbps(median(download.rounds.map((r) => r.downloader))).padStart(9)}   plain fetch ${mbps(median(download.rounds.map((r) => r.plain))).padStart(9)}   ` +
      `ratio ${download.ratio.toFixed(2)}  (goal ≥ 0.9: ${download.ratio >= 0.9 ? 'met' : 'MISSED'}; ${(download.bytes / 1e9).toFixed(1)} GB from the stand-in hub over loopback (bench/download.ts also measures over a link), sha256 alone ${mbps(download.sha256)})`,
  )
} finally {
  daemon.kill('SIGTERM')
  await daemon.exited
  bare.kill('SIGTERM')
  await bare.exited
  hub.stop()
  await server.stop()
  rmSync(dir, { recursive: true, force: true })
}
