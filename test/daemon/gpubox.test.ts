import { afterAll, beforeAll, expect, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { eq } from 'drizzle-orm'
import type { DaemonOptions } from '../../src/daemon/options'
import { startTestServer, type TestServer } from '../helpers/app'
import { daemonOptions, fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { type GpuBox, makeGpuBox } from '../helpers/gpubox'
import { firstFailure, managedFleet, stopDaemon } from '../helpers/managed'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// The daemon on a simulated GPU box (docs/worker.md "GPUs"): two 24 GB GPUs in a ledger, the box's
// nvidia-smi first on the daemon's PATH, and a stand-in `vllm serve` that applies vLLM's own rules —
// it runs on the first tensor_parallel_size GPUs of CUDA_VISIBLE_DEVICES, its engine core (a child
// process, as vLLM's EngineCore is) takes gpu_memory_utilization × each GPU and refuses to start
// without that much free, and holds it until that core process is gone. What is asserted is what the
// batches, the worker row, the box's ledger, the engines' own environment and the process table say.

const REPO = resolve(import.meta.dir, '../..')
const FAKE = join(REPO, 'test/helpers/fake-vllm.ts')
const ENTRY = {
  alpha: 'box-alpha-bf16',
  beta: 'box-beta-bf16',
  gamma: 'box-gamma-bf16',
  tp: 'box-tp-bf16',
  small1: 'box-small-1-bf16',
  small2: 'box-small-2-bf16',
  unsized: 'box-unsized-bf16',
  hang: 'box-hang-bf16',
  wide: 'box-wide-bf16',
  narrow: 'box-narrow-bf16',
  sg1: 'box-sg-1-bf16',
  sg2: 'box-sg-2-bf16',
} as const
type Name = keyof typeof ENTRY

const dir = mkdtempSync(join(tmpdir(), 'gk-gpubox-'))
const modelsDir = join(dir, 'models')
const control = join(dir, 'control')
const sha = (b: Uint8Array) => new Bun.CryptoHasher('sha256').update(b).digest('hex')
const weights = (seed: number) => new Uint8Array(4096).map((_, i) => (i * 31 + seed * 7) & 0xff)
const PATH = process.env.PATH
/** Each model's weights as the stand-in engine checks them: its catalogue vram_gb. */
const WEIGHTS: Record<string, number> = {}
let server: TestServer

beforeAll(async () => {
  mkdirSync(control, { recursive: true })
  const entries: object[] = []
  const model = (name: Name, seed: number, vram: number | null, params: object = {}, runtime = 'vllm') => {
    mkdirSync(join(modelsDir, name), { recursive: true })
    if (vram !== null) WEIGHTS[name] = vram
    writeFileSync(join(modelsDir, name, 'model.safetensors'), weights(seed))
    writeFileSync(join(modelsDir, name, 'config.json'), '{"architectures": ["FakeForCausalLM"]}')
    entries.push({
      id: ENTRY[name],
      display_name: name,
      task_type: 'chat',
      quantization: 'BF16',
      ...(vram === null ? {} : { vram_gb: vram }),
      digest: `sha256:${sha(weights(seed))}`,
      serving_profiles: [{ runtime, runtime_model_id: name, params }],
    })
  }
  model('alpha', 1, 20)
  model('beta', 2, 20)
  model('gamma', 3, 20)
  model('tp', 4, 40, { tensor_parallel_size: 2 })
  model('small1', 5, 8)
  model('small2', 6, 8)
  model('unsized', 7, null)
  model('hang', 8, 8)
  model('wide', 9, 8, { max_num_seqs: 8 })
  model('narrow', 10, 8, { max_num_seqs: 1 })
  model('sg1', 11, 8, {}, 'sglang')
  model('sg2', 12, 8, {}, 'sglang')
  const manifest = join(dir, 'models.yaml')
  writeFileSync(manifest, JSON.stringify({ models: entries }))
  server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'info' })
})

afterAll(async () => {
  process.env.PATH = PATH
  for (const pid of enginesRunning()) process.kill(pid, 'SIGKILL')
  await server?.stop()
  rmSync(dir, { recursive: true, force: true })
})

let boxes = 0
/** A fresh box of two 24 GB GPUs, its nvidia-smi first on this process's PATH (the daemon's). */
function box(): GpuBox {
  const b = makeGpuBox(join(dir, `box-${++boxes}`), [24, 24], WEIGHTS)
  process.env.PATH = b.path
  return b
}

function daemon(b: GpuBox, key: string, o: Partial<DaemonOptions> = {}, requestMs = 0): RunningAgent {
  return runAgent(
    daemonOptions(server.url, key, '', {
      runtime: 'vllm',
      engine: 'vllm',
      models_dir: modelsDir,
      launch_command: b.launchCommand({ control, requestMs }),
      engine_args: [],
      vram_gb: undefined,
      concurrency: 2,
      log_level: 'info',
      ...o,
    }),
    // The GPUs are probed: the box's nvidia-smi, found on the PATH.
    fastDeps({ gpu: undefined }),
  )
}

/** Each start of the model's engine: its pid, argv and GPU variables, as the stand-in recorded them. */
function starts(model: Name): { pid: number; argv: string[]; env: Record<string, string | null> }[] {
  const path = join(control, `${model}.starts.jsonl`)
  if (!existsSync(path)) return []
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
}

/** The pids of stand-in engines (API processes and engine cores) running on this file's models. */
function enginesRunning(model?: Name): number[] {
  const out: number[] = []
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      if (stat[stat.lastIndexOf(')') + 2] === 'Z' || !argv.includes(FAKE)) continue
      const mine = model
        ? argv.includes(join(modelsDir, model)) || argv.some((a) => a.includes(`"model":"${model}"`))
        : argv.some((a) => a.startsWith(modelsDir) || a.includes(dir))
      if (mine) out.push(Number(pid))
    } catch {}
  }
  return out.sort()
}

const alive = (pid: number) => enginesRunning().includes(pid)
const flagAfter = (argv: string[], flag: string) => argv[argv.indexOf(flag) + 1]

async function drop(id: string) {
  const { db, tables } = rowsOf(server.deps)
  await db.delete(tables.batches).where(eq(tables.batches.id, id))
}

test('two models on two GPUs at once: the second loads on the other GPU while the first one’s job still holds it', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key)
  const stall = join(control, 'alpha.stall')
  try {
    writeFileSync(stall, '')
    const first = await f.submit(ENTRY.alpha, 4)
    await until('alpha loaded, its job held at the engine', async () => {
      const m = await f.models(d.agent.id)
      return m.alpha?.state === 'loaded'
    })
    // A GPU holds no model in use: the daemon claims beta's batch, which loads and completes there.
    const second = await f.completed(await f.submit(ENTRY.beta, 4))
    expect(second.request_counts.completed).toBe(4)
    expect((await f.batch(first)).status).toBe('in_progress')
    rmSync(stall)
    expect((await f.completed(first)).request_counts.completed).toBe(4)

    const [a] = starts('alpha')
    const [bb] = starts('beta')
    expect(a!.env).toEqual({ CUDA_VISIBLE_DEVICES: '0', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' })
    expect(bb!.env).toEqual({ CUDA_VISIBLE_DEVICES: '1', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' })
    // vLLM takes its fraction of the whole GPU: the daemon passed one sized to the model.
    expect(flagAfter(a!.argv, '--gpu-memory-utilization')).toBe('0.87')
    const byModel = (x: unknown[], y: unknown[]) => String(x[0]).localeCompare(String(y[0]))
    expect(
      b
        .holders()
        .map((h) => [h.model, h.gpus])
        .sort(byModel),
    ).toEqual([
      ['alpha', [0]],
      ['beta', [1]],
    ])
    expect(b.refused()).toEqual([])
    // What an admin sees: each model's GPUs, each GPU's memory as the driver reports it (the
    // heartbeat's GB to a tenth): 0.87 of each GPU, and the driver's own reserve.
    expect(b.memory().map((g) => [g.index, g.used_gb, g.total_gb])).toEqual([
      [0, 21.13, 24],
      [1, 21.13, 24],
    ])
    const placed = (r: any) =>
      Object.fromEntries(r.models.filter((x: any) => x.gpus).map((x: any) => [x.name, x.gpus]))
    const memory = (r: any) => r.gpus.map((g: any) => [g.index, g.memory_used_gb, g.memory_total_gb])
    const row = await until('the worker row with both models placed and their memory', async () => {
      const r = await f.row(d.agent.id)
      return placed(r).beta && memory(r)[1][1] > 20 ? r : null
    })
    expect(placed(row)).toEqual({ alpha: [0], beta: [1] })
    // Used memory rounded up to a tenth (docs/worker.md "GPUs"): 21.13 GB reads 21.2.
    expect(memory(row)).toEqual([
      [0, 21.2, 24],
      [1, 21.2, 24],
    ])
    expect(
      capturedLogLines().some(
        (l) => l.includes('"msg":"loading beta for job') && l.includes('on GPU 1 (GPU 1: '),
      ),
    ).toBe(true)
  } finally {
    rmSync(stall, { force: true })
    await stopDaemon(d)
  }
  expect(enginesRunning()).toEqual([])
  expect(b.holders()).toEqual([])
})

test('a busy model’s batch claimed for the spare GPU, where a copy pays: a second copy of it runs there, and the model is listed once', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key)
  const stall = join(control, 'gamma.stall')
  const before = starts('gamma').length
  const from = capturedLogLines().length
  // Whether a copy pays reads the rates the fleet measured (docs/api.md §7 placement): the workers of
  // the tests before, which measured their engines' hundreds of requests a second, are offline by
  // now, and gamma's own rate is unmeasured (its job is held), so the server's default of 1 request/s
  // decides — 40 waiting requests outlast any load of gamma under 40 s, however loaded the machine.
  server.clock.advance(server.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
  let first = ''
  let second = ''
  try {
    writeFileSync(stall, '')
    first = await f.submit(ENTRY.gamma, 4)
    await until('gamma loaded on GPU 0, its job held at the engine', async () => {
      const m = await f.models(d.agent.id)
      return m.gamma?.state === 'loaded'
    })
    // GPU 1 holds nothing in use: the poll says spare_gpu, gamma is the only model with work, and
    // its 40 waiting requests outlast a load (placement rule 5): the job says copy.
    second = await f.submit(ENTRY.gamma, 40)
    await until('a second copy of gamma loaded on GPU 1 while the first job holds the first', () =>
      capturedLogLines()
        .slice(from)
        .some((l) => l.includes('"msg":"gamma#2 loaded"')),
    )
    const row = await until('the worker row with gamma on both GPUs', async () => {
      const r = await f.row(d.agent.id)
      const g = r.models.find((x: any) => x.name === 'gamma')
      return g?.gpus?.length === 2 ? r : null
    })
    // The worker row lists the model once, on both GPUs; the inventory too.
    expect(row.models.filter((x: any) => x.name === 'gamma')).toHaveLength(1)
    expect(row.models.find((x: any) => x.name === 'gamma')).toMatchObject({ state: 'loaded', gpus: [0, 1] })
    rmSync(stall)
    const [one, two] = starts('gamma').slice(before)
    expect(one!.env).toEqual({ CUDA_VISIBLE_DEVICES: '0', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' })
    expect(two!.env).toEqual({ CUDA_VISIBLE_DEVICES: '1', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' })
    expect(flagAfter(two!.argv, '--served-model-name')).toBe('gamma')
    const lines = await f.outputLines(await f.completed(second))
    expect(lines).toHaveLength(40)
    for (const l of lines)
      expect(l.response.body.choices[0].message.content).toStartWith(`gamma (pid ${two!.pid}) says:`)
    expect((await f.completed(first)).request_counts.completed).toBe(4)
    expect(
      b
        .holders()
        .map((h) => [h.model, h.gpus])
        .sort((x, y) => String(x[1]).localeCompare(String(y[1]))),
    ).toEqual([
      ['gamma', [0]],
      ['gamma', [1]],
    ])
    expect(b.refused()).toEqual([])
    expect(
      capturedLogLines()
        .slice(from)
        .some(
          (l) =>
            l.includes('"msg":"loading gamma#2, another copy of gamma, for job') && l.includes('on GPU 1'),
        ),
    ).toBe(true)
  } finally {
    rmSync(stall, { force: true })
    await stopDaemon(d)
    // Batches are the whole server's: one left unfinished would be served by the next test's daemon.
    for (const id of [first, second]) if (id) await drop(id)
  }
  expect(enginesRunning()).toEqual([])
  expect(b.holders()).toEqual([])
})

test('tensor parallel over two: the engine gets both GPUs and holds its share of each', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key)
  try {
    await f.completed(await f.submit(ENTRY.tp, 3))
    const [run] = starts('tp')
    expect(run!.env.CUDA_VISIBLE_DEVICES).toBe('0,1')
    expect(flagAfter(run!.argv, '--tensor-parallel-size')).toBe('2')
    expect(flagAfter(run!.argv, '--gpu-memory-utilization')).toBe('0.87')
    expect(b.holders().map((h) => [h.model, h.gpus])).toEqual([['tp', [0, 1]]])
    expect(b.refused()).toEqual([])
    await until('the worker row says tp is on GPUs 0 and 1', async () => {
      const m = await f.models(d.agent.id)
      return JSON.stringify(m.tp?.gpus) === '[0,1]'
    })
  } finally {
    await stopDaemon(d)
  }
  expect(b.holders()).toEqual([])
})

test('two small models share one GPU (--gpus 0): each passed a fraction sized to it, so vLLM starts both', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key, { gpus: [0] })
  try {
    await f.completed(await f.submit(ENTRY.small1, 2))
    await f.completed(await f.submit(ENTRY.small2, 2))
    const [one] = starts('small1')
    const [two] = starts('small2')
    // Both still run: the second did not need the first's room.
    expect(alive(one!.pid) && alive(two!.pid)).toBe(true)
    expect([one!.env.CUDA_VISIBLE_DEVICES, two!.env.CUDA_VISIBLE_DEVICES]).toEqual(['0', '0'])
    expect(flagAfter(two!.argv, '--gpu-memory-utilization')).toBe('0.37')
    expect(b.holders().map((h) => h.gpus)).toEqual([[0], [0]])
    // GPU 1 is not this daemon's: nothing there, and the worker reports GPU 0 alone.
    expect(b.memory()[1]!.used_gb).toBe(0.25)
    expect(b.holders().some((h) => h.gpus.includes(1))).toBe(false)
    expect((await f.row(d.agent.id)).gpus.map((g: any) => g.index)).toEqual([0])
    expect(b.refused()).toEqual([])
  } finally {
    await stopDaemon(d)
  }
})

test('two SGLang models share one GPU (--gpus 0): each fraction is of the memory free when it starts, so SGLang starts both', async () => {
  const b = box()
  const f = await managedFleet(server)
  // SGLang takes mem_fraction_static of the memory free before it loads (its profile_max_num_token):
  // the stand-in applies that rule.
  const d = daemon(b, f.key, {
    gpus: [0],
    runtime: 'sglang',
    engine: 'sglang',
    launch_command: b.launchCommand({ control, engine: 'sglang' }),
  })
  try {
    await f.completed(await f.submit(ENTRY.sg1, 2))
    await f.completed(await f.submit(ENTRY.sg2, 2))
    const [one] = starts('sg1')
    const [two] = starts('sg2')
    expect(alive(one!.pid) && alive(two!.pid)).toBe(true)
    expect([one!.env.CUDA_VISIBLE_DEVICES, two!.env.CUDA_VISIBLE_DEVICES]).toEqual(['0', '0'])
    // The first is sized to the whole free GPU, the second to what the first left (8 GB of ~15).
    expect(flagAfter(one!.argv, '--mem-fraction-static')).toBe('0.37')
    expect(flagAfter(two!.argv, '--mem-fraction-static')).toBe('0.57')
    expect(
      b
        .holders()
        .map((h) => h.model)
        .sort(),
    ).toEqual(['sg1', 'sg2'])
    expect(b.refused()).toEqual([])
  } finally {
    await stopDaemon(d)
  }
  expect(b.holders()).toEqual([])
})

test('a launch command without {params}: vLLM takes its default 0.9 of the GPU, so each model is charged the whole GPU and the second unloads the first', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key, {
    gpus: [0],
    launch_command: b.launchCommand({ control }).replace(' {params}', ''),
  })
  const from = capturedLogLines().length
  try {
    await f.completed(await f.submit(ENTRY.small1, 2))
    const [one] = starts('small1').slice(-1)
    expect(one!.argv).not.toContain('--gpu-memory-utilization')
    // The ledger charges it the whole GPU, as vLLM takes it.
    expect(
      capturedLogLines()
        .slice(from)
        .some((l) => l.includes('"msg":"loading small1 for job') && l.includes('(GPU 0: 24 GB of 24 GB)')),
    ).toBe(true)
    await f.completed(await f.submit(ENTRY.small2, 2))
    expect(alive(one!.pid)).toBe(false)
    expect(
      capturedLogLines()
        .slice(from)
        .some((l) => l.includes('"msg":"unloading small1: least recently used, no job needs it"')),
    ).toBe(true)
    expect(b.holders().map((h) => h.model)).toEqual(['small2'])
    expect(b.refused()).toEqual([])
  } finally {
    await stopDaemon(d)
  }
})

test('a model that needs a GPU others hold: on each GPU the least recently used idle model goes', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key)
  try {
    await f.completed(await f.submit(ENTRY.alpha, 2))
    await f.completed(await f.submit(ENTRY.beta, 2))
    const [a] = starts('alpha').slice(-1)
    const [bb] = starts('beta').slice(-1)
    await f.completed(await f.submit(ENTRY.gamma, 2))
    // alpha was used least recently: its engine (and its core) stopped; gamma on its GPU.
    expect(alive(a!.pid)).toBe(false)
    expect(alive(bb!.pid)).toBe(true)
    expect(starts('gamma').at(-1)!.env.CUDA_VISIBLE_DEVICES).toBe('0')
    expect(
      b
        .holders()
        .map((h) => [h.model, h.gpus])
        .sort(),
    ).toEqual([
      ['beta', [1]],
      ['gamma', [0]],
    ])
    expect(
      capturedLogLines().some((l) =>
        l.includes('"msg":"unloading alpha: least recently used, no job needs it"'),
      ),
    ).toBe(true)
    expect(b.refused()).toEqual([])
  } finally {
    await stopDaemon(d)
  }
})

test('an engine’s API process crashes: its engine core is ended before its memory counts as free, and the next load starts', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key)
  try {
    // Two requests answered, then the API process dies as a GPU fault kills vLLM; its core lives on.
    writeFileSync(join(control, 'alpha.crash'), '2')
    const id = await f.submit(ENTRY.alpha, 6)
    const requeued = await until('the batch requeued', async () => {
      const x = await f.batch(id)
      return x.attempts >= 1 ? x : null
    })
    expect(requeued.error).toContain('alpha: the engine exited with code 1')
    expect(requeued.error).toContain('CUDA error: an illegal memory access')
    const done = await f.completed(id)
    expect(done.request_counts.completed).toBe(6)
    const cores = b.cores('alpha')
    expect(cores).toHaveLength(2)
    // The first core (left by the crashed API process) is gone; the second holds the GPU.
    expect(alive(cores[0]!.pid)).toBe(false)
    expect(b.holders().map((h) => h.pid)).toEqual([cores[1]!.pid])
    expect(b.refused()).toEqual([])
  } finally {
    await stopDaemon(d)
  }
  expect(b.holders()).toEqual([])
})

test('a load that goes silent past --load-timeout is given up: the engine and its core stopped, the job failed saying so', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key, { load_timeout: 1 })
  const hold = join(control, 'hang.hold')
  let id = ''
  try {
    writeFileSync(hold, '')
    id = await f.submit(ENTRY.hang, 2)
    const requeued = await until('the batch requeued', async () => {
      const x = await f.batch(id)
      return x.attempts >= 1 ? x : null
    })
    const first = await firstFailure(id)
    expect(first).toMatch(
      /^hang failed to load: gave up loading hang after \d+ s \(no output for \d+ s, --load-timeout 1\); the engine's last lines: /,
    )
    expect(first).toContain('holds 0.37 of GPU')
    // A later attempt here (the batch handed back at once) fails on the load's cooldown, with its reason.
    expect(requeued.error).toContain('gave up loading hang after ')
    // Nothing of it is left, and its memory is back.
    expect(enginesRunning('hang')).toEqual([])
    expect(b.holders()).toEqual([])
    // Another model loads at once on the same worker.
    expect((await f.completed(await f.submit(ENTRY.small1, 2))).request_counts.completed).toBe(2)
  } finally {
    rmSync(hold, { force: true })
    await stopDaemon(d)
    if (id) await drop(id)
  }
})

test('a model without vram_gb holds a whole GPU (vLLM’s own fraction), and is the first unloaded when another needs room', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key)
  try {
    await f.completed(await f.submit(ENTRY.alpha, 2))
    await f.completed(await f.submit(ENTRY.unsized, 2))
    const [u] = starts('unsized')
    expect(u!.argv).not.toContain('--gpu-memory-utilization')
    expect(u!.env.CUDA_VISIBLE_DEVICES).toBe('1')
    // vLLM's default 0.9 of GPU 1: 22,118 MiB of its 24,576.
    const held = b.holders().map((h) => [h.model, h.gpus, h.mib])
    expect(held.sort((x, y) => String(x[0]).localeCompare(String(y[0])))).toEqual([
      ['alpha', [0], [21381]],
      ['unsized', [1], [22118]],
    ])
    // gamma needs a GPU: the unsized model goes first, though alpha was used longer ago.
    await f.completed(await f.submit(ENTRY.gamma, 2))
    expect(alive(u!.pid)).toBe(false)
    expect(starts('gamma').at(-1)!.env.CUDA_VISIBLE_DEVICES).toBe('1')
    expect(
      capturedLogLines().some((l) =>
        l.includes('"msg":"unloading unsized: no declared size (it holds whole GPUs), no job needs it"'),
      ),
    ).toBe(true)
    expect(b.refused()).toEqual([])
  } finally {
    await stopDaemon(d)
  }
})

test('slots and concurrency per model: each model’s requests in flight start from its own slots, asked at its load', async () => {
  const b = box()
  const f = await managedFleet(server)
  const d = daemon(b, f.key, { concurrency: 'auto', max_concurrency: 64 }, 20)
  const peak = (m: Name) => Number(readFileSync(join(control, `${m}.peak`), 'utf8'))
  const from = capturedLogLines().length
  const stall = join(control, 'wide.stall')
  try {
    // Its requests held at the engine: as many are in flight as it has slots (eight), no more.
    writeFileSync(stall, '')
    const wide = await f.submit(ENTRY.wide, 24)
    await until(
      'eight of wide’s requests in flight',
      () => existsSync(join(control, 'wide.peak')) && peak('wide') === 8,
    )
    rmSync(stall)
    await f.completed(wide)
    expect(peak('wide')).toBe(8)
    // A model of one slot after one of eight: one request at a time, not eight.
    await f.completed(await f.submit(ENTRY.narrow, 12))
    expect(peak('narrow')).toBe(1)
    const said = capturedLogLines()
      .slice(from)
      .filter((l) => l.includes('"msg":"concurrency changed"'))
      .map((l) => JSON.parse(l))
    expect(said).toContainEqual(
      expect.objectContaining({ model: 'narrow', concurrency: 1, reason: 'the engine reports its slots' }),
    )
  } finally {
    rmSync(stall, { force: true })
    await stopDaemon(d)
  }
})
