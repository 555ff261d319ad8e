import { afterAll, describe, expect, test } from 'bun:test'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { manualTimers } from '../../src/daemon/backoff'
import { alive } from '../../src/daemon/engines/child'
import {
  GPU_QUERY_FIELDS,
  GpuProbe,
  gpuEnv,
  parseCudaVersion,
  parseNvidiaSmi,
  runCommand,
} from '../../src/daemon/gpu'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'
import { spawnWorker } from '../helpers/worker-process'

const fixture = (name: string) => Bun.file(join(import.meta.dir, '../fixtures/nvidia-smi', name)).text()

describe('GPU discovery from recorded nvidia-smi output', () => {
  test('two RTX 4090s: one row per GPU, VRAM in GiB, summed memory, mean utilisation', async () => {
    const s = parseNvidiaSmi(await fixture('two-rtx4090.csv'), '12.4')
    expect(s.gpus).toEqual([
      { vendor: 'nvidia', name: 'NVIDIA GeForce RTX 4090', vram_gb: 24, driver: '550.54.14', cuda: '12.4' },
      { vendor: 'nvidia', name: 'NVIDIA GeForce RTX 4090', vram_gb: 24, driver: '550.54.14', cuda: '12.4' },
    ])
    expect(s.memory_total_gb).toBe(48)
    expect(s.memory_used_gb).toBe(17.8)
    expect(s.utilization).toBe(48.5)
  })

  test('[N/A] utilisation (MIG) is unknown, not zero', async () => {
    const s = parseNvidiaSmi(await fixture('a100-mig.csv'), '12.2')
    expect(s.gpus[0]).toMatchObject({ name: 'NVIDIA A100-SXM4-80GB', vram_gb: 80, driver: '535.161.08' })
    expect(s.utilization).toBeNull()
  })

  test('each GPU by its index with its memory as the driver reports it; --gpus keeps those indices', async () => {
    const csv = await fixture('two-rtx4090.csv')
    const s = parseNvidiaSmi(csv, '12.4')
    expect(s.devices).toEqual([
      {
        index: 0,
        uuid: 'GPU-5b1e2f3a-8c4d-4e6f-9a0b-1c2d3e4f5a6b',
        name: 'NVIDIA GeForce RTX 4090',
        total_gb: 24,
        used_gb: 17.8,
        // What the driver says is free (it keeps some for itself): less than total − used;
        // 5934 MiB is 5.795 GiB, rounded down.
        free_gb: 5.7,
        utilization: 97,
      },
      {
        index: 1,
        uuid: 'GPU-7d8e9f0a-1b2c-4d3e-8f5a-6b7c8d9e0f1a',
        name: 'NVIDIA GeForce RTX 4090',
        total_gb: 24,
        // 1 MiB used is reported, rounded up; 24144 MiB free (23.578 GiB) rounded down.
        used_gb: 0.1,
        free_gb: 23.5,
        utilization: 0,
      },
    ])
    const second = parseNvidiaSmi(csv, '12.4', [1])
    expect(second.devices.map((d) => d.index)).toEqual([1])
    expect(second.gpus).toHaveLength(1)
    expect(second.memory_total_gb).toBe(24)
    expect(second.utilization).toBe(0)
    const probe = new GpuProbe(async (cmd) => (cmd.length === 1 ? '' : csv), [1])
    expect((await probe.sample())?.devices.map((d) => d.index)).toEqual([1])
    expect(await new GpuProbe(async (cmd) => (cmd.length === 1 ? '' : csv), [5]).sample()).toBeNull()
  })

  test('free memory is rounded down and used memory up, never over-reporting what is free; a total to the nearest', () => {
    // 6140 MiB is 5.996 GiB: to the nearest that would be 6.0 free, more than the driver has.
    const line = (total: number, used: number, free: number) =>
      `0, GPU-1, NVIDIA Test, ${total}, ${used}, ${free}, 0, 550.54.14`
    const [a] = parseNvidiaSmi(line(24564, 5940, 6140)).devices
    expect(a).toMatchObject({ total_gb: 24, used_gb: 5.9, free_gb: 5.9 })
    // Exact tenths stay as they are.
    const [b] = parseNvidiaSmi(line(25088, 2048, 23040)).devices
    expect(b).toMatchObject({ total_gb: 24.5, used_gb: 2, free_gb: 22.5 })
    // Without memory.free, total − used, rounded down.
    const [c] = parseNvidiaSmi(line(24576, 5940, Number.NaN).replace('NaN', '[N/A]')).devices
    expect(c!.free_gb).toBe(18.1)
    expect(parseNvidiaSmi(line(24564, 5940, 6140)).memory_used_gb).toBe(5.9)
  })

  test('the variables that give an engine its GPU set: nvidia-smi’s numbering, in its order', () => {
    expect(gpuEnv([1, 3])).toEqual({ CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '1,3' })
    expect(gpuEnv(null)).toEqual({})
  })

  test('the CUDA version comes from the banner', async () => {
    expect(parseCudaVersion(await fixture('banner.txt'))).toBe('12.4')
    expect(parseCudaVersion('no banner')).toBe('')
  })

  test('empty or garbled output reports no GPU', () => {
    expect(parseNvidiaSmi('').gpus).toEqual([])
    expect(parseNvidiaSmi('No devices were found\n').gpus).toEqual([])
  })

  test('the probe asks for the documented fields and reports nothing without nvidia-smi', async () => {
    const calls: string[][] = []
    const csv = await fixture('two-rtx4090.csv')
    const banner = await fixture('banner.txt')
    const probe = new GpuProbe(async (cmd) => {
      calls.push(cmd)
      return cmd.length === 1 ? banner : csv
    })
    const s = await probe.sample()
    expect(s?.gpus.map((g) => g.cuda)).toEqual(['12.4', '12.4'])
    expect(calls[0]).toEqual([
      'nvidia-smi',
      `--query-gpu=${GPU_QUERY_FIELDS.join(',')}`,
      '--format=csv,noheader,nounits',
    ])
    await probe.sample()
    // The banner (CUDA version) is read once.
    expect(calls.filter((c) => c.length === 1)).toHaveLength(1)
    expect(await new GpuProbe(async () => null).sample()).toBeNull()
    expect(await new GpuProbe(async () => '').sample()).toBeNull()
  })
})

describe('--gpus checked against nvidia-smi at the start (docs/worker.md "GPUs")', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gk-gpu-'))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))
  const script = (name: string, body: string) => {
    const path = join(dir, name)
    writeFileSync(path, `#!/bin/sh\n${body}\n`)
    chmodSync(path, 0o755)
    return path
  }
  /** nvidia-smi's calls, run as `path` instead. */
  const as = (path: string) => (cmd: string[], timeoutMs: number) =>
    runCommand([path, ...cmd.slice(1)], timeoutMs)

  test('a GPU nvidia-smi does not list is one line naming it and what it lists; the listed ones pass', async () => {
    const csv = await fixture('two-rtx4090.csv')
    const run = async () => csv
    expect(await new GpuProbe(run, [0, 3]).checkSelected()).toBe(
      '--gpus 0,3: nvidia-smi lists no GPU 3 (it lists 0, 1)',
    )
    expect(await new GpuProbe(run, [1]).checkSelected()).toBeNull()
    expect(await new GpuProbe(run).checkSelected()).toBeNull()
    expect(await new GpuProbe(async () => null, [0]).checkSelected()).toBe(
      '--gpus 0: nvidia-smi could not list the GPUs (nvidia-smi is not there)',
    )
  })

  test('a hung nvidia-smi: each call cut at its time limit and killed, asked a bounded number of times with a growing wait, each failure logged with its reason', async () => {
    const pids = join(dir, 'pids')
    const hung = script('hung', `echo $$ >> ${pids}\nexec sleep 600`)
    const timers = manualTimers()
    const logFrom = capturedLogLines().length
    const probe = new GpuProbe(as(hung), [0], { timeoutMs: 200, tries: 3, backoffMs: 1000, timers })
    const checked = probe.checkSelected()
    await until('the first wait asked', () => timers.asked.length === 1)
    timers.advance(1000)
    await until('the second wait asked', () => timers.asked.length === 2)
    timers.advance(2000)
    expect(await checked).toBe(
      `--gpus 0: nvidia-smi could not list the GPUs (${hung} did not answer within 0.2 s; 3 tries)`,
    )
    expect(timers.asked).toEqual([1000, 2000])
    const said = capturedLogLines()
      .slice(logFrom)
      .map((l) => JSON.parse(l))
      .filter((r) => r.msg === 'nvidia-smi failed; asking again')
    expect(said.map((r) => [r.reason, r.retry_in_ms])).toEqual([
      [`${hung} did not answer within 0.2 s`, 1000],
      [`${hung} did not answer within 0.2 s`, 2000],
    ])
    // Every call's process is gone: none is left running.
    const started = readFileSync(pids, 'utf8').trim().split('\n').map(Number)
    expect(started).toHaveLength(3)
    await until('the hung calls ended', () => started.every((pid) => !alive(pid)))
  })

  test('one that fails says how (its last line), and a sample reports no GPU', async () => {
    const failing = script(
      'failing',
      'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9',
    )
    const probe = new GpuProbe(as(failing), undefined, { timeoutMs: 5000 })
    expect(await probe.sample()).toBeNull()
    const r = await runCommand([failing], 5000)
    expect(r).toEqual({
      failed: `${failing} exited with code 9: NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.`,
    })
  })

  test('nvidia-smi sees what an engine sees of the environment: never the worker key or the hub token', async () => {
    const printEnv = script('print-env', 'env')
    const saved = {
      key: process.env.GRIDKEEP_WORKER_KEY,
      hub: process.env.HF_TOKEN,
      cuda: process.env.CUDA_CACHE_PATH,
    }
    process.env.GRIDKEEP_WORKER_KEY = 'gk-worker-key-never-passed'
    process.env.HF_TOKEN = 'hf_token_never_passed'
    process.env.CUDA_CACHE_PATH = '/var/cache/cuda'
    try {
      const out = await runCommand([printEnv], 5000)
      expect(typeof out).toBe('string')
      const names = (out as string).split('\n').map((l) => l.split('=')[0])
      expect(names).not.toContain('GRIDKEEP_WORKER_KEY')
      expect(names).not.toContain('HF_TOKEN')
      expect(out).not.toContain('never-passed')
      expect(out).not.toContain('never_passed')
      expect(names).toContain('PATH')
      expect(out).toContain('CUDA_CACHE_PATH=/var/cache/cuda')
    } finally {
      for (const [name, value] of [
        ['GRIDKEEP_WORKER_KEY', saved.key],
        ['HF_TOKEN', saved.hub],
        ['CUDA_CACHE_PATH', saved.cuda],
      ] as const)
        if (value === undefined) delete process.env[name]
        else process.env[name] = value
    }
  })

  test('the daemon does not start on a --gpus nvidia-smi does not list: exit 2 with the line', async () => {
    const bin = mkdtempSync(join(dir, 'bin-'))
    const csv = await fixture('two-rtx4090.csv')
    writeFileSync(join(dir, 'two.csv'), csv)
    script(`${bin.slice(dir.length + 1)}/nvidia-smi`, `[ $# -eq 0 ] && exit 0\ncat ${join(dir, 'two.csv')}`)
    const worker = spawnWorker(
      [
        '--server',
        'http://127.0.0.1:9',
        '--runtime',
        'openai',
        '--gpus',
        '1,2',
        '--state-dir',
        join(dir, 'state'),
      ],
      { PATH: `${bin}:${process.env.PATH}`, HOME: dir, GRIDKEEP_WORKER_KEY: `gk-${'x'.repeat(40)}` },
      { outputDir: dir },
    )
    expect(await worker.exited()).toBe(2)
    expect(worker.output()).toContain(
      'gridkeep worker: --gpus 1,2: nvidia-smi lists no GPU 2 (it lists 0, 1)',
    )
  })
})
