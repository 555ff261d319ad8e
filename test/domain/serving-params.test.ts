import { describe, expect, test } from 'bun:test'
import { paramFlags, paramsProblem } from '../../src/domain/serving-params'

describe('serving-profile params (docs/api.md §4)', () => {
  test('known keys of the right type pass; an integer is a number', () => {
    expect(paramsProblem('llama.cpp', { ctx_size: 8192, n_gpu_layers: 999, embedding: true })).toBeNull()
    expect(paramsProblem('vllm', { gpu_memory_utilization: 1, max_model_len: 16384 })).toBeNull()
    expect(paramsProblem('sglang', { mem_fraction_static: 0.85 })).toBeNull()
  })

  test('an unknown key, a wrong type, or any key for a runtime without params is named', () => {
    expect(paramsProblem('llama.cpp', { ctx_sise: 8192 })).toBe(
      'param "ctx_sise" is not a setting llama.cpp knows',
    )
    expect(paramsProblem('vllm', { max_model_len: '16k' })).toBe(
      'param "max_model_len" must be an integer (got "16k")',
    )
    expect(paramsProblem('llama.cpp', { embedding: 'yes' })).toBe(
      'param "embedding" must be a boolean (got "yes")',
    )
    expect(paramsProblem('ollama', { num_ctx: 8192 })).toBe('param "num_ctx" is not a setting ollama knows')
    expect(paramsProblem('ollama', {})).toBeNull()
  })

  test('as flags: kebab-case, true bare, false left out', () => {
    expect(
      paramFlags({ max_model_len: 16384, enforce_eager: true, trust_remote_code: false, dtype: 'bfloat16' }),
    ).toEqual(['--max-model-len', '16384', '--enforce-eager', '--dtype', 'bfloat16'])
  })
})
