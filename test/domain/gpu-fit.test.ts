import { describe, expect, test } from 'bun:test'
import { fitsGpus, profileGpuCount } from '../../src/domain/gpu-fit'

// docs/api.md §7 Poll rule 2, per GPU: the GPU count a serving profile runs on, and whether a model
// fits GPUs reported one by one. The server's predicate and the daemon's placement read this rule.

describe('profileGpuCount', () => {
  test('vLLM: tensor × pipeline parallel; SGLang: tp_size × pp_size; llama.cpp: as many as it needs; else 1', () => {
    expect(profileGpuCount('vllm', {})).toBe(1)
    expect(profileGpuCount('vllm', { tensor_parallel_size: 2 })).toBe(2)
    expect(profileGpuCount('vllm', { tensor_parallel_size: 2, pipeline_parallel_size: 2 })).toBe(4)
    expect(profileGpuCount('sglang', { tp_size: 2 })).toBe(2)
    expect(profileGpuCount('sglang', { tp_size: 2, pp_size: 2 })).toBe(4)
    expect(profileGpuCount('llama.cpp', { tensor_parallel_size: 2 })).toBeNull()
    expect(profileGpuCount('ollama', { tensor_parallel_size: 2 })).toBe(1)
    expect(profileGpuCount('tgi', {})).toBe(1)
    // Not a whole number of at least 1: counts 1.
    for (const v of [0, -2, 1.5, '2', null])
      expect(profileGpuCount('vllm', { tensor_parallel_size: v })).toBe(1)
  })
})

describe('fitsGpus', () => {
  test('a count of GPUs, each holding its share', () => {
    expect(fitsGpus([24, 24], 30, 1)).toBe(false)
    expect(fitsGpus([24, 24], 30, 2)).toBe(true)
    expect(fitsGpus([24, 24], 48, 2)).toBe(true)
    expect(fitsGpus([24, 24], 48.5, 2)).toBe(false)
    expect(fitsGpus([24, 24], 10, 3)).toBe(false)
    // The largest GPUs are the ones that count.
    expect(fitsGpus([8, 40, 16], 30, 1)).toBe(true)
    expect(fitsGpus([8, 40, 16], 30, 2)).toBe(true)
    expect(fitsGpus([8, 40, 16], 30, 3)).toBe(false)
    expect(fitsGpus([], 1, 1)).toBe(false)
  })

  test('no count (llama.cpp): some number of the largest GPUs', () => {
    expect(fitsGpus([24, 24], 30, null)).toBe(true)
    expect(fitsGpus([12, 12, 12], 30, null)).toBe(true)
    expect(fitsGpus([12, 12, 12], 37, null)).toBe(false)
    expect(fitsGpus([40, 8], 30, null)).toBe(true)
    expect(fitsGpus([], 1, null)).toBe(false)
  })
})
