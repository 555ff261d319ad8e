// A stand-in for `vllm serve` (and SGLang's launch_server) for the daemon's launched-engine tests,
// run by bun as its own process: `bun test/helpers/fake-vllm.ts serve MODEL_DIR
// --served-model-name NAME --host 127.0.0.1 --port P [flags…]` (`--model-path DIR` as SGLang
// takes it works too).
//
// - It "loads" the model directory: its config.json must be a JSON object and a weights file
//   (*.safetensors) must be there, else it prints a Python-like traceback and exits 1, as vLLM
//   does for a corrupt model. Then it waits FAKE_VLLM_LOAD_MS (default 100) before it binds its
//   port, as a real engine answers only once the weights are on the GPU.
// - GET /health, GET /v1/models (the served name), POST /v1/chat/completions and
//   /v1/completions answer naming the model and this process (`<name> (pid N) says: …`); another
//   `model` gets vLLM's 404.
// - Told through files in the directory FAKE_VLLM_CONTROL (when set), keyed by the served name
//   with `/` as `_`:
//     <key>.starts.jsonl  it appends {pid, argv} at each start (the tests read its command line)
//     <key>.hold          while it exists, the load does not end (a test holds a model loading)
//     <key>.crash         holding N: the request after the Nth answered one makes it print an
//                         engine error and exit 1 (the file is removed first: it crashes once)
//     <key>.stall         while it exists, requests are not answered (a job held at its model)
//     <key>.peak          it writes the most requests it has had in flight at once
// - FAKE_VLLM_REQUEST_MS (default 0): how long each request takes; at most --max-num-seqs (default
//   256) are served at once, the rest wait (an engine's batch slots).
// - --enable-prompt-tokens-details (vLLM; SGLang's --enable-cache-report), as the daemon's default
//   launch commands pass: usage carries prompt_tokens_details.cached_tokens, the prompt tokens (one
//   per character here) a previous request of this process began with — its prefix cache, in small.
//   Without it, usage has no details, as vLLM's has not.
// - SIGTERM: it says so and exits 0.
//
// On a simulated GPU box (GPUBOX_DIR set: test/helpers/gpubox.ts) it applies vLLM's own rules (its
// V1 engine, vLLM 0.9.1 on) — or SGLang's, run as `fake-vllm.ts sglang --model-path DIR …` (SGLang
// 0.4–0.5's profile_max_num_token: its fraction is of the memory free before it loads, see
// engineCore()):
// - It sees the GPUs of CUDA_VISIBLE_DEVICES as CUDA does (every GPU of the box when that is unset;
//   none when it is empty; an entry naming no GPU of the box hides it and every entry after it) and
//   runs on the first tensor_parallel_size × pipeline_parallel_size of them (SGLang: --tp-size,
//   --pp-size); none is CUDA's "no CUDA-capable device is detected", fewer than that is vLLM's error.
// - A fraction outside (0, 1] is refused as vLLM's config refuses it.
// - Its engine core is a child process (vLLM's EngineCore, in the same process group) that takes
//   gpu_memory_utilization (default 0.9; SGLang: --mem-fraction-static) × each of its GPUs' own
//   total, and refuses to start — "Free memory on device … is less than desired GPU memory
//   utilization", the API process then exiting 1 — unless each has that much free; and, when the box
//   knows the model's weights (box.json `weights_gb`, the catalogue's vram_gb: the strictest
//   reading), refuses with "No available memory for the cache blocks" unless that fraction of each
//   GPU holds more than its share of them. The memory is held in the box's ledger (held/<core
//   pid>.json) for as long as the core process runs: a core whose API process died holds it until
//   someone ends it. The API process does not outlive its core: a core that died makes it exit 1
//   with vLLM's EngineDeadError (one stopped, exit 0, stops it too). Cores take the box's lock (bounded, taken over from a dead owner) while they
//   read and claim free memory. Each refusal is appended to the box's refused.jsonl (benchmarks
//   count them).

import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { join } from 'node:path'
import { gpuState, readBox, running } from './fake-nvidia-smi'

if (process.argv[2] === '--engine-core') await engineCore(JSON.parse(process.argv[3]!))

const args = process.argv.slice(2)
if (args[0] === 'serve') args.shift()
/** SGLang's memory rule instead of vLLM's (`fake-vllm.ts sglang --model-path DIR …`). */
const sglang = args[0] === 'sglang'
if (sglang) args.shift()

function flag(name: string): string | undefined {
  const i = args.indexOf(name)
  if (i >= 0) return args[i + 1]
  const eq = args.find((a) => a.startsWith(`${name}=`))
  return eq?.slice(name.length + 1)
}

const modelDir = flag('--model-path') ?? flag('--model') ?? (args[0]?.startsWith('--') ? undefined : args[0])
const served = flag('--served-model-name') ?? modelDir ?? ''
const port = Number(flag('--port') ?? 8000)
const host = flag('--host') ?? '127.0.0.1'
const control = process.env.FAKE_VLLM_CONTROL
const key = served.replaceAll('/', '_')
const controlFile = (ext: string) => (control ? join(control, `${key}.${ext}`) : null)

const info = (msg: string) => console.log(`INFO fake-vllm ${msg}`)
const fail = (lines: string[]): never => {
  for (const l of lines) console.error(l)
  process.exit(1)
}

const starts = controlFile('starts.jsonl')
if (starts)
  appendFileSync(
    starts,
    `${JSON.stringify({
      pid: process.pid,
      argv: process.argv.slice(2),
      env: {
        CUDA_VISIBLE_DEVICES: process.env.CUDA_VISIBLE_DEVICES ?? null,
        CUDA_DEVICE_ORDER: process.env.CUDA_DEVICE_ORDER ?? null,
      },
    })}\n`,
  )

info(`vLLM API server version 0.0.0-fake; args: ${args.join(' ')}`)
if (!modelDir) fail(['error: the following arguments are required: model_tag'])
let config: unknown
try {
  config = JSON.parse(readFileSync(join(modelDir!, 'config.json'), 'utf8'))
} catch (e) {
  fail([
    'Traceback (most recent call last):',
    `  File "vllm/transformers_utils/config.py", line 312, in get_config`,
    `ValueError: Invalid repository ID or local directory specified: '${modelDir}' (config.json: ${(e as Error).message})`,
  ])
}
if (typeof config !== 'object' || config === null || Array.isArray(config))
  fail([`ValueError: ${modelDir}/config.json is not a model config`])
if (!readdirSync(modelDir!).some((f) => f.endsWith('.safetensors')))
  fail([`RuntimeError: Cannot find any model weights with '${modelDir}'`])
info(`loading weights from ${modelDir}`)

const hold = controlFile('hold')
const loadMs = Number(process.env.FAKE_VLLM_LOAD_MS ?? 100)
if (process.env.GPUBOX_DIR) await startEngineCore(process.env.GPUBOX_DIR)
await Bun.sleep(loadMs)
while (hold && existsSync(hold)) await Bun.sleep(20)

let answered = 0
const reportsCached =
  args.includes('--enable-prompt-tokens-details') || args.includes('--enable-cache-report')
const seen: string[] = []
/** The longest start of `prompt` an earlier prompt shares: what a prefix cache holds of it. */
function cachedOf(prompt: string): number {
  let best = 0
  for (const p of seen) {
    let i = 0
    while (i < p.length && i < prompt.length && p[i] === prompt[i]) i++
    best = Math.max(best, i)
  }
  if (seen.length < 64) seen.push(prompt)
  return best
}
const crash = controlFile('crash')
const stall = controlFile('stall')
const peakFile = controlFile('peak')
let inFlight = 0
let peak = 0
const requestMs = Number(process.env.FAKE_VLLM_REQUEST_MS ?? 0)
const seqs = Number(flag('--max-num-seqs') ?? flag('--max-running-requests') ?? 256)
let busy = 0
const queue: (() => void)[] = []
async function slot<T>(fn: () => Promise<T>): Promise<T> {
  if (busy >= seqs) await new Promise<void>((go) => queue.push(go))
  busy++
  try {
    return await fn()
  } finally {
    busy--
    queue.shift()?.()
  }
}

function crashNow(): never {
  console.error('ERROR fake-vllm EngineCore encountered a fatal error.')
  console.error('RuntimeError: CUDA error: an illegal memory access was encountered')
  process.exit(1)
}

const json = (body: unknown, status = 200) => Response.json(body, { status })

const server = Bun.serve({
  hostname: host,
  port,
  async fetch(req) {
    const path = new URL(req.url).pathname
    if (req.method === 'GET' && path === '/health') return new Response('')
    if (req.method === 'GET' && path === '/v1/models')
      return json({
        object: 'list',
        data: [{ id: served, object: 'model', owned_by: 'vllm', root: modelDir, max_model_len: 4096 }],
      })
    if (req.method !== 'POST' || (path !== '/v1/chat/completions' && path !== '/v1/completions'))
      return json({ error: { message: 'Not Found', type: 'NotFoundError', code: 404 } }, 404)
    if (crash && existsSync(crash) && answered >= Number(readFileSync(crash, 'utf8'))) {
      rmSync(crash, { force: true })
      crashNow()
    }
    const body = (await req.json().catch(() => null)) as any
    if (body?.model !== served)
      return json(
        {
          error: {
            message: `The model \`${body?.model}\` does not exist.`,
            type: 'NotFoundError',
            code: 404,
          },
        },
        404,
      )
    inFlight++
    if (inFlight > peak && peakFile) {
      peak = inFlight
      writeFileSync(peakFile, String(peak))
    }
    try {
      while (stall && existsSync(stall)) await Bun.sleep(20)
      if (requestMs > 0) await slot(() => Bun.sleep(requestMs))
    } finally {
      inFlight--
    }
    const prompt =
      path === '/v1/chat/completions'
        ? String(body.messages?.at(-1)?.content ?? '')
        : String(body.prompt ?? '')
    const text = `${served} (pid ${process.pid}) says: ${prompt}`
    answered++
    const usage = {
      prompt_tokens: prompt.length,
      completion_tokens: 4,
      total_tokens: prompt.length + 4,
      ...(reportsCached ? { prompt_tokens_details: { cached_tokens: cachedOf(prompt) } } : {}),
    }
    return json(
      path === '/v1/chat/completions'
        ? {
            id: `chatcmpl-${answered}`,
            object: 'chat.completion',
            model: served,
            choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
            usage,
          }
        : {
            id: `cmpl-${answered}`,
            object: 'text_completion',
            model: served,
            choices: [{ index: 0, text, finish_reason: 'stop' }],
            usage,
          },
    )
  },
})
info(`Uvicorn running on http://${host}:${server.port} (Press CTRL+C to quit)`)

process.on('SIGTERM', () => {
  info('Shutting down FastAPI HTTP server.')
  server.stop(true)
  process.exit(0)
})

// ── the simulated GPU box ─────────────────────────────────────────────────────────────────────

/**
 * The GPUs this process sees, by the box's index, as CUDA decides: every GPU when
 * CUDA_VISIBLE_DEVICES is unset; else its entries in order (an index, or a GPU's UUID), up to the
 * first that names no GPU of the box — CUDA ignores that one and every one after it — so an empty
 * value is no GPU at all.
 */
function visibleGpus(box: string): number[] {
  const gpus = gpuState(box)
  const env = process.env.CUDA_VISIBLE_DEVICES
  if (env === undefined) return gpus.map((g) => g.index)
  const out: number[] = []
  for (const entry of env.split(',').map((e) => e.trim())) {
    const g = /^\d+$/.test(entry)
      ? gpus.find((x) => x.index === Number(entry))
      : gpus.find((x) => entry.length > 0 && x.uuid.startsWith(entry))
    if (!g) break
    out.push(g.index)
  }
  return out
}

/** Starts the engine core on this process's GPUs; exits 1 (as vLLM does) when it will not start. */
async function startEngineCore(box: string) {
  const n =
    Number(flag('--tensor-parallel-size') ?? flag('--tp-size') ?? 1) *
    Number(flag('--pipeline-parallel-size') ?? flag('--pp-size') ?? 1)
  // SGLang 0.4's default mem_fraction_static at tp_size 1 (server_args.py); vLLM's default utilization.
  const util = Number(
    (sglang ? flag('--mem-fraction-static') : flag('--gpu-memory-utilization')) ?? (sglang ? 0.88 : 0.9),
  )
  // vLLM's CacheConfig (SGLang's ServerArgs likewise): a fraction of the GPU, above 0 and at most 1.
  if (!(util > 0 && util <= 1))
    fail([`ValueError: GPU memory utilization must be less than 1.0. Got ${util}.`])
  const visible = visibleGpus(box)
  // torch's account of CUDA's cudaErrorNoDevice.
  if (visible.length === 0) fail(['RuntimeError: CUDA error: no CUDA-capable device is detected'])
  if (visible.length < n)
    fail([
      `ValueError: The number of required GPUs (${n}) exceeds the total number of available GPUs (${visible.length}).`,
    ])
  const gpus = visible.slice(0, n)
  const weights = readBox(box).weights_gb?.[served] ?? null
  info(
    `starting the engine core on GPUs ${gpus.join(',')} with ${sglang ? 'mem_fraction_static' : 'gpu_memory_utilization'} ${util}`,
  )
  let ready = false
  const core = Bun.spawn(
    [
      process.execPath,
      import.meta.path,
      '--engine-core',
      JSON.stringify({ box, gpus, util, model: served, weights_gb: weights, sglang }),
    ],
    {
      stdio: ['ignore', 'inherit', 'inherit'],
      ipc(message) {
        if (message === 'ready') ready = true
      },
    },
  )
  while (!ready && core.exitCode === null) await Bun.sleep(10)
  if (!ready) fail(['RuntimeError: Engine core initialization failed. See root cause above.'])
  // The API process does not outlive its core: one stopped (its group's SIGTERM, exit 0) stops it
  // too; one that died (a crash, SIGKILL) is vLLM's fatal error, and it exits 1.
  core.exited.then((code) => {
    if (code === 0) {
      info('Shutting down FastAPI HTTP server.')
      process.exit(0)
    }
    fail([
      'ERROR fake-vllm Engine core proc EngineCore_0 died unexpectedly, shutting down client.',
      'vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.',
    ])
  })
}

/**
 * The box's lock (a directory holding its owner's pid), so that two engine cores never read the
 * same free memory: taken at once when free, taken over when its owner is gone (a core killed
 * while it held it), and given up after LOCK_WAIT_MS.
 */
async function lockBox(box: string): Promise<() => void> {
  // How long an engine core waits for the lock before it gives up.
  const LOCK_WAIT_MS = 10_000
  const lock = join(box, 'lock')
  const owner = join(lock, 'pid')
  const deadline = Date.now() + LOCK_WAIT_MS
  for (;;) {
    try {
      mkdirSync(lock)
      writeFileSync(owner, String(process.pid))
      return () => rmSync(lock, { recursive: true, force: true })
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
    }
    let pid: number | null = null
    try {
      pid = Number(readFileSync(owner, 'utf8'))
    } catch {}
    // Its owner gone (or it died between taking the lock and naming itself, a while ago): stale.
    const age = (() => {
      try {
        return Date.now() - statSync(lock).mtimeMs
      } catch {
        return 0
      }
    })()
    if ((pid !== null && pid > 0 && !running(pid)) || (pid === null && age > 1000))
      rmSync(lock, { recursive: true, force: true })
    else if (Date.now() > deadline)
      throw new Error(`the GPU box's lock ${lock} is held by pid ${pid} for more than ${LOCK_WAIT_MS} ms`)
    else await Bun.sleep(5)
  }
}

/**
 * The engine core: takes its memory of the box's GPUs, or refuses as the engine does; then holds it
 * until it ends.
 * - vLLM (its V1 engine): on each GPU it wants `util` × that GPU's own total, which must be free at
 *   its start ("Free memory on device …"), and the model's weights (its share of them, with tensor
 *   parallelism) must leave room for the cache in it ("No available memory for the cache blocks").
 * - SGLang (ModelRunner.profile_max_num_token): its fraction is of the memory FREE before it loads
 *   (the smallest of its GPUs'): the cache gets `util` × that free memory less the weights, and none
 *   is "Not enough memory. Please try to increase --mem-fraction-static."; it holds `util` × that
 *   free memory on each GPU. Another process's memory counts against it.
 */
async function engineCore(o: {
  box: string
  gpus: number[]
  util: number
  model: string
  weights_gb: number | null
  sglang: boolean
}) {
  const unlock = await lockBox(o.box)
  let refused: string | null = null
  try {
    const mine = gpuState(o.box).filter((x) => o.gpus.includes(x.index))
    const share = o.weights_gb === null ? 0 : (o.weights_gb / o.gpus.length) * 1024
    const mib: number[] = []
    if (o.sglang) {
      const before = Math.min(...mine.map((g) => g.free_mib))
      if (o.util * before - share <= 0)
        refused = 'RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.'
      else for (const _ of mine) mib.push(Math.round(o.util * before))
    } else
      for (const g of mine) {
        const want = o.util * g.total_mib
        if (g.free_mib < want) {
          refused =
            `ValueError: Free memory on device cuda:${o.gpus.indexOf(g.index)} (${(g.free_mib / 1024).toFixed(2)}/${(g.total_mib / 1024).toFixed(2)} GiB) ` +
            `on startup is less than desired GPU memory utilization (${o.util}, ${(want / 1024).toFixed(2)} GiB). ` +
            'Decrease GPU memory utilization or reduce GPU memory used by other processes.'
          break
        }
        if (want <= share) {
          refused =
            'ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.'
          break
        }
        mib.push(Math.round(want))
      }
    if (!refused) {
      mkdirSync(join(o.box, 'held'), { recursive: true })
      writeFileSync(
        join(o.box, 'held', `${process.pid}.json`),
        JSON.stringify({
          pid: process.pid,
          gpus: mine.map((g) => g.index),
          mib,
          model: o.model,
          at_ms: Date.now(),
        }),
      )
    }
  } finally {
    unlock()
  }
  if (refused) {
    appendFileSync(
      join(o.box, 'refused.jsonl'),
      `${JSON.stringify({ model: o.model, gpus: o.gpus, error: refused })}\n`,
    )
    console.error(`ERROR EngineCore ${refused}`)
    process.exit(1)
  }
  console.log(`INFO EngineCore (pid ${process.pid}) holds ${o.util} of GPU ${o.gpus.join(', ')}`)
  process.send?.('ready')
  process.on('SIGTERM', () => process.exit(0))
  // Held until this process ends (killed with its group, or on its own).
  setInterval(() => {}, 1 << 30)
  await new Promise(() => {})
}
