import { afterAll, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import { ownChild } from '../helpers/children'
import { type GpuBox, makeGpuBox } from '../helpers/gpubox'
import { until } from '../helpers/until'

// The stand-in engine of the GPU-box simulator (test/helpers/fake-vllm.ts) is as strict as the real
// engines on the points the daemon's placement relies on: CUDA's reading of CUDA_VISIBLE_DEVICES,
// vLLM's startup free-memory check and its cache that must fit beside the weights, each GPU's own
// total. Run as its own process, as the daemon runs it; what is asserted is its exit, its words and
// the box's ledger.

const FAKE = resolve(import.meta.dir, '../helpers/fake-vllm.ts')
const dir = mkdtempSync(join(tmpdir(), 'gk-standin-'))
const model = join(dir, 'models', 'm')
mkdirSync(model, { recursive: true })
writeFileSync(join(model, 'model.safetensors'), 'weights')
writeFileSync(join(model, 'config.json'), '{"architectures": ["FakeForCausalLM"]}')

afterAll(() => rmSync(dir, { recursive: true, force: true }))

let boxes = 0
let outs = 0
/** Starts the stand-in on a box; resolves with its exit code and output once it exits or answers. */
async function serve(
  gpus: number[],
  o: { visible?: string; args?: string[]; weights?: number; box?: GpuBox } = {},
): Promise<{
  code: number | null
  output: string
  box: GpuBox
  /** The API process. */
  proc: Subprocess
  read(): Promise<string>
  stop(): void
}> {
  const box =
    o.box ?? makeGpuBox(join(dir, `box-${++boxes}`), gpus, o.weights === undefined ? {} : { m: o.weights })
  const out = join(dir, `out-${++outs}.log`)
  const proc = Bun.spawn(
    [process.execPath, FAKE, 'serve', model, '--served-model-name', 'm', '--port', '0', ...(o.args ?? [])],
    {
      stdin: 'ignore',
      stdout: Bun.file(out),
      stderr: Bun.file(out),
      env: {
        ...process.env,
        GPUBOX_DIR: box.dir,
        FAKE_VLLM_LOAD_MS: '0',
        ...(o.visible === undefined ? {} : { CUDA_VISIBLE_DEVICES: o.visible }),
      },
      detached: true,
    },
  )
  // Its group (the API process and its engine core) is ended whatever the test does.
  const stop = () => {
    try {
      process.kill(-proc.pid, 'SIGKILL')
    } catch {}
  }
  ownChild({ stop })
  const read = () => Bun.file(out).text()
  // It answers (its core holds memory) or it exits.
  await until(
    'the stand-in exits or serves',
    async () => proc.exitCode !== null || (await read()).includes('Uvicorn running'),
  )
  return {
    code: proc.exitCode,
    output: await read(),
    box,
    proc,
    read,
    stop,
  }
}

/** Whether the process runs (a zombie does not). */
const running = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return false
  }
}

test('CUDA_VISIBLE_DEVICES empty is no GPU at all, as CUDA reads it; unset is every GPU', async () => {
  const none = await serve([24, 24], { visible: '' })
  expect(none.code).toBe(1)
  expect(none.output).toContain('RuntimeError: CUDA error: no CUDA-capable device is detected')
  expect(none.box.holders()).toEqual([])
  const all = await serve([24, 24], { args: ['--tensor-parallel-size', '2'] })
  try {
    expect(all.code).toBeNull()
    expect(all.box.holders().map((h) => h.gpus)).toEqual([[0, 1]])
  } finally {
    all.stop()
  }
})

test('an index not in the box hides itself and every one after it, with CUDA’s words when none is left', async () => {
  const gone = await serve([24, 24], { visible: '7' })
  expect(gone.code).toBe(1)
  expect(gone.output).toContain('RuntimeError: CUDA error: no CUDA-capable device is detected')
  expect(gone.output).not.toContain('TypeError')
  // "1,7,0": GPU 1 alone is visible; two were asked for.
  const short = await serve([24, 24], { visible: '1,7,0', args: ['--tensor-parallel-size', '2'] })
  expect(short.code).toBe(1)
  expect(short.output).toContain(
    'ValueError: The number of required GPUs (2) exceeds the total number of available GPUs (1).',
  )
})

test('a fraction too small for the weights is refused as vLLM refuses it; one that holds them starts', async () => {
  // 0.3 of 24 GB is 7.2 GB: no room for the cache beside 8 GB of weights.
  const small = await serve([24], { weights: 8, args: ['--gpu-memory-utilization', '0.3'] })
  expect(small.code).toBe(1)
  expect(small.output).toContain('ValueError: No available memory for the cache blocks.')
  expect(small.box.refused()).toHaveLength(1)
  const enough = await serve([24], { weights: 8, args: ['--gpu-memory-utilization', '0.37'] })
  try {
    expect(enough.code).toBeNull()
    expect(enough.box.refused()).toEqual([])
  } finally {
    enough.stop()
  }
})

test('the memory held on each GPU is its fraction of that GPU’s own total', async () => {
  const run = await serve([24, 48], {
    args: ['--tensor-parallel-size', '2', '--gpu-memory-utilization', '0.5'],
  })
  try {
    expect(run.code).toBeNull()
    expect(run.box.memory().map((g) => [g.index, Math.round(g.used_gb)])).toEqual([
      [0, 12],
      [1, 24],
    ])
  } finally {
    run.stop()
  }
})

test('a box lock left by a core that died is taken over, not waited on forever', async () => {
  const boxDir = join(dir, `box-${boxes + 1}`)
  // A lock whose owner is gone (a pid no process holds).
  const dead = Bun.spawn(['true'])
  await dead.exited
  mkdirSync(join(boxDir, 'lock'), { recursive: true })
  writeFileSync(join(boxDir, 'lock', 'pid'), String(dead.pid))
  const run = await serve([24])
  try {
    expect(run.code).toBeNull()
    expect(run.box.holders()).toHaveLength(1)
  } finally {
    run.stop()
  }
})

test('an engine that wants more than is free is refused with vLLM’s words, and holds nothing', async () => {
  const first = await serve([24], { args: ['--gpu-memory-utilization', '0.6'] })
  try {
    expect(first.code).toBeNull()
    // 0.5 of 24 GB is 12 GB; 0.6 of it is held, and the driver keeps its own.
    const second = await serve([24], { box: first.box, args: ['--gpu-memory-utilization', '0.5'] })
    expect(second.code).toBe(1)
    expect(second.output).toContain(
      'ValueError: Free memory on device cuda:0 (9.35/24.00 GiB) on startup is less than desired GPU memory utilization (0.5, 12.00 GiB).',
    )
    expect(first.box.refused()).toEqual([expect.objectContaining({ model: 'm', gpus: [0] })])
    expect(first.box.holders()).toHaveLength(1)
  } finally {
    first.stop()
  }
})

test('a fraction outside (0, 1] is refused as vLLM’s config refuses it', async () => {
  const over = await serve([24], { args: ['--gpu-memory-utilization', '1.5'] })
  expect(over.code).toBe(1)
  expect(over.output).toContain('ValueError: GPU memory utilization must be less than 1.0. Got 1.5.')
  expect(over.box.holders()).toEqual([])
})

test('the engine core outlives a SIGKILLed API process, holding its memory; a core that dies takes the API process with it', async () => {
  const run = await serve([24], { args: ['--gpu-memory-utilization', '0.5'] })
  try {
    const [core] = run.box.holders()
    expect(core!.pid).not.toBe(run.proc.pid)
    run.proc.kill('SIGKILL')
    await run.proc.exited
    // Its memory is still held: only ending the core gives it back.
    expect(running(core!.pid)).toBe(true)
    expect(run.box.holders().map((h) => h.pid)).toEqual([core!.pid])
    expect(run.box.memory()[0]!.used_gb).toBeGreaterThan(12)
  } finally {
    run.stop()
  }
  const again = await serve([24], { args: ['--gpu-memory-utilization', '0.5'] })
  try {
    const [core] = again.box.holders()
    process.kill(core!.pid, 'SIGKILL')
    expect(await again.proc.exited).toBe(1)
    expect(await again.read()).toContain('EngineDeadError: EngineCore encountered an issue.')
    expect(again.box.holders()).toEqual([])
  } finally {
    again.stop()
  }
})
