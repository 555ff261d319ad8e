import { describe, expect, test } from 'bun:test'
import { join } from 'node:path'
import { GPU_QUERY_FIELDS, GpuProbe, parseCudaVersion, parseNvidiaSmi } from '../../src/daemon/gpu'

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
