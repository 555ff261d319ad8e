import { describe, expect, test } from 'bun:test'
import { checkParams, OLLAMA_LOAD_OPTIONS, paramFlags } from '../../src/domain/serving-params'
import { closest, editDistance } from '../../src/lib/edit-distance'

describe('serving-profile params (docs/api.md §4)', () => {
  test('known keys of the right type are kept, nothing said; an integer is a number', () => {
    for (const [runtime, params] of [
      ['llama.cpp', { ctx_size: 8192, n_gpu_layers: 999, embedding: true }],
      ['vllm', { gpu_memory_utilization: 1, max_model_len: 16384 }],
      ['sglang', { mem_fraction_static: 0.85 }],
      ['ollama', { num_ctx: 8192, num_gpu: 99, temperature: 0.2, stop: ['</s>'], keep_alive: '30m' }],
    ] as const)
      expect(checkParams(runtime, params)).toEqual({ params, notes: [] })
  })

  test('a value of the wrong type is an error, left out; the rest is kept', () => {
    expect(checkParams('vllm', { max_model_len: '16k', dtype: 'bfloat16' })).toEqual({
      params: { dtype: 'bfloat16' },
      notes: [
        {
          key: 'max_model_len',
          level: 'error',
          message: 'param "max_model_len" must be an integer (got "16k")',
        },
      ],
    })
    expect(checkParams('llama.cpp', { embedding: 'yes' }).notes[0]!.message).toBe(
      'param "embedding" must be a boolean (got "yes")',
    )
    expect(checkParams('ollama', { stop: 'x' }).notes[0]!.message).toBe(
      'param "stop" must be a list of strings (got "x")',
    )
  })

  test('keep_alive is a number of seconds or a Go duration, as Ollama parses it', () => {
    for (const ok of [300, -1, 0, '10m', '1h30m', '-1s', '0', '1.5h'])
      expect(checkParams('ollama', { keep_alive: ok }).notes).toEqual([])
    for (const bad of ['forever', '10', '-1', true])
      expect(checkParams('ollama', { keep_alive: bad }).notes.map((n) => n.level)).toEqual(['error'])
  })

  test('an unknown key of an open-ended engine is a warning naming the closest known key, and is kept', () => {
    expect(checkParams('llama.cpp', { n_gpu_layer: 99 })).toEqual({
      params: { n_gpu_layer: 99 },
      notes: [
        {
          key: 'n_gpu_layer',
          level: 'warning',
          message:
            'param "n_gpu_layer" is not a llama.cpp setting gridkeep knows (did you mean "n_gpu_layers"?); it is passed to the engine as written',
        },
      ],
    })
    // A key close to nothing is named without a guess.
    expect(checkParams('vllm', { speculative_config: '{}' }).notes[0]!.message).toBe(
      'param "speculative_config" is not a vllm setting gridkeep knows; it is passed to the engine as written',
    )
  })

  test('Ollama options are a closed set: an unknown key is an error, left out; a runtime without a table takes none', () => {
    expect(checkParams('ollama', { num_ctxx: 8192, num_ctx: 4096 })).toEqual({
      params: { num_ctx: 4096 },
      notes: [
        {
          key: 'num_ctxx',
          level: 'error',
          message: 'param "num_ctxx" is not an option ollama knows (did you mean "num_ctx"?)',
        },
      ],
    })
    expect(checkParams('tgi', { max_input_tokens: 1 }).notes).toEqual([
      { key: 'max_input_tokens', level: 'error', message: 'param "max_input_tokens": tgi takes no params' },
    ])
    expect(Object.keys(OLLAMA_LOAD_OPTIONS)).toContain('num_ctx')
  })

  test('as flags: kebab-case, true bare, false left out', () => {
    expect(
      paramFlags({ max_model_len: 16384, enforce_eager: true, trust_remote_code: false, dtype: 'bfloat16' }),
    ).toEqual(['--max-model-len', '16384', '--enforce-eager', '--dtype', 'bfloat16'])
  })
})

describe('edit distance', () => {
  test('counts insertions, deletions and substitutions; the closest is named only when near', () => {
    expect(editDistance('ctx_sise', 'ctx_size')).toBe(1)
    expect(editDistance('', 'abc')).toBe(3)
    expect(editDistance('kitten', 'sitting')).toBe(3)
    expect(closest('max_model_length', ['max_model_len', 'max_num_seqs'])).toBe('max_model_len')
    expect(closest('foo', ['ctx_size', 'jinja'])).toBeNull()
  })
})
