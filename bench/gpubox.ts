import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeGpuBox } from '../test/helpers/gpubox'
import { benchServer } from './lib/fixture'

// Three models over two GPUs (docs/worker.md "GPUs"): a simulated box of two 24 GB GPUs
// (test/helpers/gpubox.ts: an nvidia-smi reading a ledger, first on the daemon's PATH, and a
// stand-in `vllm serve` applying vLLM's memory rule: its engine core takes gpu_memory_utilization ×
// each GPU, refuses to start without that much free, and holds it while it runs). Three catalogue
// entries of 20 GB each — two fit the box at once, one per GPU — and mixed batches of all three,
// created together, run through the real server and the real daemon (`gridkeep worker --runtime
// vllm`, its own process). Each engine serves --max-num-seqs requests at a time, each taking
// REQUEST_MS, and takes LOAD_MS to load.
//
// Printed: the makespan (the first batch created → the last completed) over its lower bound, and
// the engine starts refused for memory. The bound: each GPU holds one model at a time (two need 40
// GB of 24), an engine serves at most `slots` requests of REQUEST_MS at once, and every model is
// loaded (LOAD_MS) at least once. With one load per model (3), some GPU serves two models whole:
// ≥ 2 × (LOAD_MS + a model's work). With more loads (a model served on both GPUs, as two copies or
// one after the other), the two GPUs share ≥ 4 loads and all the work: ≥ (4 × LOAD_MS + all the
// work) ÷ 2. The bound is the smaller of the two (8 s with the figures below; the 7.5 s of all the
// work and 3 loads ÷ 2 is not reachable: it would serve a model on both GPUs without loading it
// twice).
// Goals: ≤ 1.2×, 0 refused. Then the same bound from figures measured on this machine now: the
// same box and daemon serving two of the models alone (their batches only, one model per GPU: a
// schedule with nothing to decide) — its makespan is a load and a model's work as this machine
// runs them, its loads as the daemon measured them (model_stats load_seconds); the makespan over
// that bound is what placement costs beyond the machine's own speed (an estimate: both runs are
// measured, and on a shared machine whose load moves between them it can come out below 1). Beside
// it, the same batches on the same box for a daemon that knows no GPUs (no nvidia-smi, `--vram-gb
// 48`: one budget, as before GPUs were placed one by one): its refused starts, and how many batches
// failed.
//
//   bun run bench/gpubox.ts            12 batches of 400 lines (4 per model)
//   BENCH_QUICK=1                      6 batches of 200 lines; BENCH_BATCHES=N, BENCH_LINES=N

const QUICK = process.env.BENCH_QUICK || process.argv.includes('--quick')
const BATCHES = Number(process.env.BENCH_BATCHES ?? (QUICK ? 6 : 12))
const LINES = Number(process.env.BENCH_LINES ?? (QUICK ? 200 : 400))
const REQUEST_MS = 20
const SLOTS = 8
const LOAD_MS = 1000
/** One budget: the run ends after this long without a batch finishing. */
const STALL_MS = 20_000
const VRAM_GB = 20
const MODELS = ['alpha', 'beta', 'gamma'] as const
const entryOf = (m: string) => `gpubox-${m}-bf16`

const dir = mkdtempSync(join(tmpdir(), 'gk-bench-gpubox-'))
const modelsDir = join(dir, 'models')
const weights = (seed: number) => new Uint8Array(4096).map((_, i) => (i * 31 + seed * 7) & 0xff)
const sha = (b: Uint8Array) => new Bun.CryptoHasher('sha256').update(b).digest('hex')
MODELS.forEach((m, i) => {
  mkdirSync(join(modelsDir, m), { recursive: true })
  writeFileSync(join(modelsDir, m, 'model.safetensors'), weights(i + 1))
  writeFileSync(join(modelsDir, m, 'config.json'), '{"architectures": ["FakeForCausalLM"]}')
})
const manifest = join(dir, 'models.yaml')
writeFileSync(
  manifest,
  JSON.stringify({
    models: MODELS.map((m, i) => ({
      id: entryOf(m),
      display_name: m,
      task_type: 'chat',
      quantization: 'BF16',
      vram_gb: VRAM_GB,
      digest: `sha256:${sha(weights(i + 1))}`,
      serving_profiles: [{ runtime: 'vllm', runtime_model_id: m, params: { max_num_seqs: SLOTS } }],
    })),
  }),
)

interface Outcome {
  makespanS: number
  completed: number
  failed: number
  /** Batches neither completed nor failed when the run ended (one budget: waiting out a cooldown). */
  waiting: number
  refused: number
  /** The daemon's measured loads (model_stats load_seconds), the mean over its models. */
  loadS: number
}

/**
 * One run: a fresh server, box and daemon; every batch created at once; until all are done.
 * `models`: the models whose batches are made (a batch per model in turn).
 */
async function run(mode: 'gpus' | 'one budget', models: readonly string[] = MODELS): Promise<Outcome> {
  // Each run its own box, state directory and log.
  const name = `${mode.replace(' ', '-')}-${models.length}`
  const server = await benchServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'error' })
  // Each engine must fit the model's weights (its vram_gb, the strictest reading) beside its cache.
  const box = makeGpuBox(
    join(dir, `box-${name}`),
    [24, 24],
    Object.fromEntries(MODELS.map((m) => [m, VRAM_GB])),
  )
  const api = async (path: string, init: RequestInit & { token?: string } = {}) => {
    const res = await fetch(server.url + path, {
      ...init,
      headers: {
        ...(init.token ? { authorization: `Bearer ${init.token}` } : {}),
        ...(typeof init.body === 'string' ? { 'content-type': 'application/json' } : {}),
      },
    })
    const body = (await res.json()) as any
    if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(body)}`)
    return body
  }
  const { access_token: token } = await api('/v1/auth/login', {
    method: 'POST',
    body: JSON.stringify({ email: 'bench@example.test', password: 'bench-password' }),
  })
  const daemon = Bun.spawn(
    [
      'bun',
      join(import.meta.dir, '../src/cli.ts'),
      'worker',
      '--server',
      server.url,
      '--runtime',
      'vllm',
      '--models-dir',
      modelsDir,
      '--launch-command',
      box.launchCommand({ loadMs: LOAD_MS, requestMs: REQUEST_MS }),
      '--state-dir',
      join(dir, `worker-${name}`),
      '--log-level',
      process.env.BENCH_LOG ? 'info' : 'warn',
      ...(mode === 'one budget' ? ['--vram-gb', '48'] : []),
    ],
    {
      env: {
        ...process.env,
        GRIDKEEP_WORKER_KEY: server.key,
        // The box's nvidia-smi first on the PATH; without GPUs, none at all.
        PATH: mode === 'gpus' ? box.path : (process.env.PATH ?? ''),
      },
      // BENCH_LOG=DIR keeps each run's daemon log there.
      stdout: process.env.BENCH_LOG ? Bun.file(join(process.env.BENCH_LOG, `daemon-${name}.log`)) : 'ignore',
      stderr: 'ignore',
    },
  )
  try {
    // The files first, then the batches all at once: the clock starts at the first batch.
    const files: { model: string; id: string }[] = []
    const batches = (BATCHES / MODELS.length) * models.length
    for (let b = 0; b < batches; b++) {
      const model = models[b % models.length]!
      const lines = Array.from({ length: LINES }, (_, i) =>
        JSON.stringify({
          custom_id: `r-${i}`,
          method: 'POST',
          url: '/v1/chat/completions',
          body: { model: entryOf(model), messages: [{ role: 'user', content: `Say ${i}` }], max_tokens: 4 },
        }),
      )
      const form = new FormData()
      form.append('purpose', 'batch')
      form.append('file', new Blob([`${lines.join('\n')}\n`]), 'in.jsonl')
      files.push({ model, id: (await api('/v1/files', { method: 'POST', token, body: form })).id })
    }
    // The daemon registered and holding a poll.
    while (server.deps.pollWaiters.size === 0) await Bun.sleep(10)
    const t0 = performance.now()
    const ids: string[] = []
    for (const f of files)
      ids.push(
        (await api('/v1/batches', { method: 'POST', token, body: JSON.stringify({ input_file_id: f.id }) }))
          .id,
      )
    const status = server.deps.sqlite.query<{ status: string }, [string]>(
      'select status from batches where id = ?',
    )
    const done = new Set<string>()
    let last = t0
    const deadline = t0 + 600_000
    // One budget: an engine refused for memory leaves its batch waiting out the model's load
    // cooldown for another worker (docs/worker.md "Faults"), and this box has no other: the run
    // ends once nothing has finished for STALL_MS, the batches still waiting counted as such.
    const stalled = () => mode === 'one budget' && performance.now() - last > STALL_MS
    while (done.size < ids.length && performance.now() < deadline && !stalled()) {
      for (const id of ids) {
        if (done.has(id)) continue
        const s = status.get(id)!.status
        if (s === 'completed' || s === 'failed') {
          done.add(id)
          last = performance.now()
        }
      }
      await Bun.sleep(10)
    }
    const count = (s: string) => ids.filter((id) => status.get(id)!.status === s).length
    const stats = server.deps.sqlite
      .query<{ model_stats: string }, []>('select model_stats from workers')
      .all()
      .flatMap((w) => JSON.parse(w.model_stats) as { load_seconds?: number }[])
      .map((m) => m.load_seconds)
      .filter((x): x is number => typeof x === 'number')
    return {
      makespanS: (last - t0) / 1000,
      completed: count('completed'),
      failed: count('failed'),
      waiting: ids.length - done.size,
      refused: box.refused().length,
      loadS: stats.length ? stats.reduce((a, b) => a + b, 0) / stats.length : Number.NaN,
    }
  } finally {
    daemon.kill('SIGTERM')
    await daemon.exited
    await server.stop()
  }
}

const GPUS = 2
/** The bound for `models` equal models of `workS` each, loaded in `loadS`, over GPUS GPUs (above). */
const boundOf = (models: number, loadS: number, workS: number) =>
  Math.min(Math.ceil(models / GPUS) * (loadS + workS), ((models + 1) * loadS + models * workS) / GPUS)
const modelWorkS = ((BATCHES / MODELS.length) * LINES * REQUEST_MS) / 1000 / SLOTS
const boundS = boundOf(MODELS.length, LOAD_MS / 1000, modelWorkS)
const placed = await run('gpus')
const alone = await run('gpus', MODELS.slice(0, GPUS))
const budget = await run('one budget')
rmSync(dir, { recursive: true, force: true })

const s = (x: number) => `${x.toFixed(2)} s`
console.log(
  `${BATCHES} batches × ${LINES} lines over 3 models of 20 GB on 2 × 24 GB GPUs ` +
    `(${SLOTS} slots × ${REQUEST_MS} ms a request, ${LOAD_MS} ms a load)`,
)
console.log(
  `GPUs placed one by one: makespan ${s(placed.makespanS)} vs bound ${s(boundS)} ` +
    `(${(placed.makespanS / boundS).toFixed(2)}×; goal ≤ 1.2×); ${placed.completed} completed, ` +
    `${placed.failed} failed; engine starts refused for memory: ${placed.refused} (goal 0)`,
)
// This machine now: a load as the daemon measured it, and a model's work as the lone-models run took it.
const workHereS = alone.makespanS - alone.loadS
const hereS = boundOf(MODELS.length, alone.loadS, workHereS)
console.log(
  `measured here: ${GPUS} models alone on the ${GPUS} GPUs take ${s(alone.makespanS)} (a load ${s(alone.loadS)}, ` +
    `a model's work ${s(workHereS)} vs ${s(modelWorkS)} at the engines' rate): bound ${s(hereS)}, ` +
    `makespan ${(placed.makespanS / hereS).toFixed(2)}× it (loads here: ${s(placed.loadS)})`,
)
console.log(
  `one budget (--vram-gb 48, no nvidia-smi): ${budget.completed} completed, ${budget.failed} failed, ` +
    `${budget.waiting} still waiting ${STALL_MS / 1000} s after the last finished (refused loads cool ` +
    `down), the last at ${s(budget.makespanS)}; engine starts refused for memory: ${budget.refused}`,
)
