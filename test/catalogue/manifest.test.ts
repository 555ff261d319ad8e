import { describe, expect, test } from 'bun:test'
import { checkManifest, idViolations, quantSlug } from '../../src/modules/catalogue/manifest'
import { fakeDigest } from '../helpers/catalogue'

// docs/api.md §4 "Catalogue entry" rules 1–3 and the entry schema, as checked by the one validation that
// seeding and `gridkeep catalogue check` share.

const yaml = (...entries: string[]) => `models:\n${entries.join('\n')}\n`
const entry = (id: string, extra = '') =>
  `  - id: ${JSON.stringify(id)}\n    task_type: chat\n    runtime: ollama\n    runtime_model_id: "m:${id}"\n${extra}`

function violationsOf(text: string) {
  const r = checkManifest(text)
  if (!r.ok) throw new Error(r.error)
  return r
}

describe('rule 1: id is lowercase [a-z0-9] segments joined by "-"', () => {
  test.each(['Llama-3', 'llama_3', 'llama--3', '-llama', 'llama-', 'llama 3', 'llama.3', 'lläma', ''])(
    '%p is refused',
    (id) => {
      expect(idViolations(id, null).map((v) => v.rule)).toContain(1)
      const r = violationsOf(yaml(entry(id)))
      expect(r.entries).toHaveLength(0)
      expect(r.violations.some((v) => v.rule === 1 && v.index === 0)).toBe(true)
    },
  )

  test.each(['llama-3-1-8b', 'a', '0', 'qwen2-5-7b'])('%p is accepted', (id) => {
    expect(idViolations(id, null)).toEqual([])
    expect(violationsOf(yaml(entry(id))).entries.map((e) => e.id)).toEqual([id])
  })
})

describe('rule 2: with a quantization the id ends with the quant slug', () => {
  test.each([
    ['Q4_K_M', 'q4km'],
    ['Q8_0', 'q80'],
    ['BF16', 'bf16'],
    ['AWQ-INT4', 'awqint4'],
    ['fp8 e4m3', 'fp8e4m3'],
  ])('slug of %p is %p', (label, slug) => {
    expect(quantSlug(label)).toBe(slug)
  })

  test('an id without the slug is refused, naming the expected slug', () => {
    const r = violationsOf(yaml(entry('llama-3-1-8b', '    quantization: Q4_K_M\n')))
    expect(r.entries).toHaveLength(0)
    expect(r.violations).toEqual([
      expect.objectContaining({
        index: 0,
        id: 'llama-3-1-8b',
        rule: 2,
        message: expect.stringContaining('q4km'),
      }),
    ])
  })

  test('the slug must be the last whole segment, not a suffix of one', () => {
    expect(idViolations('llama-xq4km', 'Q4_K_M').map((v) => v.rule)).toEqual([2])
    expect(idViolations('llama-q4-k-m', 'Q4_K_M').map((v) => v.rule)).toEqual([2])
    expect(idViolations('llama-q4km', 'Q4_K_M')).toEqual([])
    expect(idViolations('q4km', 'Q4_K_M')).toEqual([])
  })

  test('without a quantization there is no slug constraint', () => {
    expect(violationsOf(yaml(entry('llama-3-1-8b'))).entries).toHaveLength(1)
  })

  test('a quantization with nothing to slug is refused', () => {
    const r = violationsOf(yaml(entry('llama', '    quantization: "--"\n')))
    expect(r.violations.map((v) => v.rule)).toEqual([2])
  })
})

describe('rule 3: the id never contains a runtime name', () => {
  test.each([
    ['llama-3-ollama', 'ollama'],
    ['vllm-llama-3', 'vllm'],
    ['llama-3-llamacpp', 'llamacpp'],
    ['llama-3-llama-cpp', 'llamacpp'],
    ['qwen-sglang', 'sglang'],
    ['mistral-tgi', 'tgi'],
    ['phi-lmstudio', 'lmstudio'],
    ['phi-lm-studio', 'lmstudio'],
    ['openai-gpt-oss-20b', 'openai'],
  ])('%p is refused (contains %p)', (id, name) => {
    const r = violationsOf(yaml(entry(id)))
    expect(r.entries).toHaveLength(0)
    expect(r.violations).toEqual([
      expect.objectContaining({ rule: 3, id, message: expect.stringContaining(`"${name}"`) }),
    ])
  })

  test('a model family named like part of a runtime is fine ("llama" is not "llama.cpp")', () => {
    expect(idViolations('llama-3-2-1b-instruct-q80', 'Q8_0')).toEqual([])
  })

  test('runtime names elsewhere (source_ref, runtime_model_id) are provenance, not identity', () => {
    const r = violationsOf(
      yaml(entry('gpt-oss-20b', '    source_ref: openai/gpt-oss-20b\n    source_type: huggingface\n')),
    )
    expect(r.violations).toEqual([])
  })
})

describe('one bad entry never hides the good ones', () => {
  test('every violation is reported with its index and id; valid entries pass', () => {
    const r = violationsOf(
      yaml(entry('good-one'), entry('Bad_Id'), entry('also-good'), entry('x-ollama'), entry('q-q4km')),
    )
    expect(r.total).toBe(5)
    expect(r.entries.map((e) => e.id)).toEqual(['good-one', 'also-good', 'q-q4km'])
    expect(r.violations.map((v) => [v.index, v.id, v.rule])).toEqual([
      [1, 'Bad_Id', 1],
      [3, 'x-ollama', 3],
    ])
  })

  test('an id can break several rules at once; each is reported', () => {
    const r = violationsOf(yaml(entry('Ollama_Model', '    quantization: Q4_K_M\n')))
    expect(r.violations.map((v) => v.rule).sort()).toEqual([1, 2, 3])
  })
})

describe('entry schema', () => {
  test('unknown fields are refused (a typo must not pass silently)', () => {
    const r = violationsOf(yaml(entry('a', '    vram: 8\n')))
    expect(r.entries).toHaveLength(0)
    expect(r.violations).toEqual([
      expect.objectContaining({ rule: 'schema', message: '/vram: unknown field' }),
    ])
  })

  test('wrong types and enum values say what was expected', () => {
    const r = violationsOf(
      yaml(
        entry('a', '    vram_gb: lots\n'),
        '  - id: b\n    task_type: poetry\n    runtime: ollama\n    runtime_model_id: b',
        entry('c', '    context_length: 4096.5\n'),
        entry('d', '    serving_profiles:\n      - runtime: koboldcpp\n        runtime_model_id: d\n'),
      ),
    )
    expect(r.entries).toHaveLength(0)
    const messages = r.violations.map((v) => v.message)
    expect(messages[0]).toContain('/vram_gb')
    expect(messages[0]).toContain('number')
    expect(messages[1]).toContain('/task_type')
    expect(messages[1]).toContain('"embedding"')
    expect(messages[2]).toContain('/context_length')
    expect(messages[3]).toContain('/serving_profiles/0/runtime')
    expect(messages[3]).toContain('"llama.cpp"')
  })

  test('an entry that is not a mapping, or has no id, is refused', () => {
    const r = violationsOf('models:\n  - just-a-string\n  - task_type: chat\n')
    expect(r.violations.map((v) => [v.index, v.rule])).toEqual([
      [0, 'schema'],
      [1, 'schema'],
    ])
  })

  test('an entry needs a way to run: runtime + runtime_model_id together, or serving_profiles', () => {
    const r = violationsOf(
      yaml(
        '  - id: none\n    task_type: chat',
        '  - id: half\n    task_type: chat\n    runtime: vllm',
        '  - id: other-half\n    task_type: chat\n    runtime_model_id: x',
      ),
    )
    expect(r.entries).toHaveLength(0)
    expect(r.violations.map((v) => v.index)).toEqual([0, 1, 2])
  })

  test('an enabled entry needs task_type; a disabled stub may leave it open (rule 8)', () => {
    const r = violationsOf(
      yaml(
        '  - id: open\n    runtime: ollama\n    runtime_model_id: x',
        '  - id: stub\n    enabled: false\n    status: unverified\n    runtime: ollama\n    runtime_model_id: y',
      ),
    )
    expect(r.entries.map((e) => e.id)).toEqual(['stub'])
    expect(r.violations).toEqual([
      expect.objectContaining({ id: 'open', message: expect.stringContaining('task_type') }),
    ])
  })

  test('duplicate ids: the first wins, the later one is reported', () => {
    const r = violationsOf(yaml(entry('dup'), entry('dup')))
    expect(r.entries).toHaveLength(1)
    expect(r.violations).toEqual([
      expect.objectContaining({ index: 1, message: expect.stringContaining('duplicate id') }),
    ])
  })

  test('a manifest that is not YAML, or has no models list, is unusable as a whole', () => {
    expect(checkManifest('models: [a, b\n  c: : :').ok).toBe(false)
    expect(checkManifest('- a\n- b\n').ok).toBe(false)
    expect(checkManifest('entries: []\n').ok).toBe(false)
    expect(checkManifest('models: 3\n').ok).toBe(false)
    expect(checkManifest('models:\n')).toEqual({
      ok: true,
      total: 0,
      entries: [],
      violations: [],
      notices: [],
    })
  })
})

describe('serving profiles (docs/api.md §4)', () => {
  test('without explicit profiles one is derived from runtime/runtime_model_id', () => {
    const [e] = violationsOf(yaml(entry('a'))).entries
    expect(e!.serving_profiles).toEqual([
      { runtime: 'ollama', runtime_model_id: 'm:a', params: {}, derived: true },
    ])
  })

  test('explicit profiles are kept; the deprecated columns come from the first one', () => {
    const [e] = violationsOf(
      yaml(
        '  - id: a\n    task_type: chat\n    serving_profiles:\n' +
          '      - { runtime: vllm, runtime_model_id: org/a, params: { max_model_len: 8192 } }\n' +
          '      - { runtime: sglang, runtime_model_id: org/a }',
      ),
    ).entries
    expect(e!.runtime).toBe('vllm')
    expect(e!.runtime_model_id).toBe('org/a')
    expect(e!.serving_profiles).toEqual([
      { runtime: 'vllm', runtime_model_id: 'org/a', params: { max_model_len: 8192 }, derived: false },
      { runtime: 'sglang', runtime_model_id: 'org/a', params: {}, derived: false },
    ])
  })

  test('two profiles for the same runtime are refused (unique per entry and runtime)', () => {
    const r = violationsOf(
      yaml(
        '  - id: a\n    task_type: chat\n    serving_profiles:\n' +
          '      - { runtime: ollama, runtime_model_id: a1 }\n      - { runtime: ollama, runtime_model_id: a2 }',
      ),
    )
    expect(r.entries).toHaveLength(0)
    expect(r.violations[0]!.message).toContain('a second profile for "ollama"')
  })

  test("an entry is never dropped for its params: a wrong type is an error and left out, an open-ended engine's unknown key a warning and kept", () => {
    const text = yaml(
      '  - id: typo\n    task_type: chat\n    serving_profiles:\n' +
        '      - { runtime: ollama, runtime_model_id: t }\n' +
        '      - { runtime: llama.cpp, runtime_model_id: t, params: { ctx_sise: 8192, threads: 2 } }',
      '  - id: typed\n    task_type: chat\n    serving_profiles:\n' +
        '      - { runtime: vllm, runtime_model_id: org/t, params: { max_model_len: "16k", dtype: half } }',
      '  - id: qwen-ctx\n    task_type: chat\n    serving_profiles:\n' +
        '      - { runtime: ollama, runtime_model_id: n, params: { num_ctx: 8192, num_ctxx: 1, keep_alive: 10m } }',
      '  - id: fine\n    task_type: chat\n    serving_profiles:\n' +
        '      - { runtime: llama.cpp, runtime_model_id: f, params: { ctx_size: 8192, embedding: false } }',
    )
    const r = checkManifest(text)
    if (!r.ok) throw new Error(r.error)
    expect(r.violations).toEqual([])
    expect(r.entries.map((e) => [e.id, e.serving_profiles.map((p) => p.params)])).toEqual([
      ['typo', [{}, { ctx_sise: 8192, threads: 2 }]],
      ['typed', [{ dtype: 'half' }]],
      ['qwen-ctx', [{ num_ctx: 8192, keep_alive: '10m' }]],
      ['fine', [{ ctx_size: 8192, embedding: false }]],
    ])
    expect(r.notices.map((n) => [n.index, n.id, n.level, n.message])).toEqual([
      [
        0,
        'typo',
        'warning',
        '/serving_profiles/1/params (llama.cpp): param "ctx_sise" is not a llama.cpp setting gridkeep knows (did you mean "ctx_size"?); it is passed to the engine as written',
      ],
      [
        1,
        'typed',
        'error',
        '/serving_profiles/0/params (vllm): param "max_model_len" must be an integer (got "16k"); left out',
      ],
      [
        2,
        'qwen-ctx',
        'error',
        '/serving_profiles/0/params (ollama): param "num_ctxx" is not an option ollama knows (did you mean "num_ctx"?); left out',
      ],
    ])
  })

  test('runtime/runtime_model_id given beside profiles must be one of them', () => {
    const r = violationsOf(
      yaml(
        '  - id: a\n    task_type: chat\n    runtime: ollama\n    runtime_model_id: other\n' +
          '    serving_profiles:\n      - { runtime: ollama, runtime_model_id: a1 }',
      ),
    )
    expect(r.entries).toHaveLength(0)
  })
})

describe('digests (docs/api.md §4)', () => {
  const hex = fakeDigest('weights')

  test.each([hex, hex.toUpperCase(), `sha256:${hex}`, `SHA256:${hex.toUpperCase()}`])(
    '%p is stored as 64 lowercase hex',
    (spelling) => {
      const [e] = violationsOf(yaml(entry('a', `    digest: "${spelling}"\n`))).entries
      expect(e!.digest).toBe(hex)
    },
  )

  test.each([hex.slice(1), `${hex}0`, `md5:${hex}`, 'z'.repeat(64)])('%p is refused', (bad) => {
    const r = violationsOf(yaml(entry('a', `    digest: "${bad}"\n`)))
    expect(r.entries).toHaveLength(0)
    expect(r.violations[0]!.message).toContain('/digest')
  })

  test('artifact file digests are normalized the same way; duplicate paths are refused', () => {
    const files = `    artifact_files:\n      - { path: w.gguf, sha256: "sha256:${hex.toUpperCase()}", size_bytes: 10 }\n      - { path: p.gguf, sha256: "${fakeDigest('p')}" }\n`
    const [e] = violationsOf(yaml(entry('a', files))).entries
    expect(e!.artifact_files).toEqual([
      { path: 'w.gguf', sha256: hex, size_bytes: 10 },
      { path: 'p.gguf', sha256: fakeDigest('p'), size_bytes: null },
    ])
    const dup = `    artifact_files:\n      - { path: w.gguf, sha256: "${hex}" }\n      - { path: w.gguf, sha256: "${hex}" }\n`
    expect(violationsOf(yaml(entry('b', dup))).entries).toHaveLength(0)
    const bad = `    artifact_files:\n      - { path: w.gguf, sha256: "nope" }\n`
    expect(violationsOf(yaml(entry('c', bad))).entries).toHaveLength(0)
  })
})

describe('renames in the manifest (docs/api.md §4 catalogue rule 5)', () => {
  test('renamed_from may not equal the id, still be an entry, or be claimed twice', () => {
    const r = violationsOf(
      yaml(
        entry('self', '    renamed_from: self\n'),
        entry('old-name'),
        entry('new-name', '    renamed_from: old-name\n'),
        entry('first', '    renamed_from: gone\n'),
        entry('second', '    renamed_from: gone\n'),
      ),
    )
    expect(r.entries.map((e) => e.id)).toEqual(['old-name', 'first'])
    expect(r.violations.map((v) => v.id)).toEqual(['self', 'new-name', 'second'])
  })
})

describe('the shipped catalogue/models.yaml', () => {
  const text = require('node:fs').readFileSync('catalogue/models.yaml', 'utf8') as string
  const r = violationsOf(text)

  test('has zero violations', () => {
    expect(r.violations).toEqual([])
    expect(r.entries.length).toBe(r.total)
  })

  test('covers every task type, several runtimes, lineage groups and an artifact_files entry', () => {
    expect(new Set(r.entries.map((e) => e.task_type))).toEqual(
      new Set(['chat', 'text-generation', 'embedding', 'vision']),
    )
    expect(r.entries.some((e) => e.serving_profiles.length > 1)).toBe(true)
    expect(r.entries.some((e) => e.artifact_files.length >= 2)).toBe(true)
    const lineages = r.entries.map((e) => e.lineage)
    expect(lineages.filter((l) => l === 'meta-llama/Llama-3.1-8B-Instruct').length).toBeGreaterThan(1)
    for (const e of r.entries) {
      expect(e.parameter_size).not.toBeNull()
      expect(e.context_length).not.toBeNull()
      expect(e.size_gb).not.toBeNull()
      expect(e.homepage_url).toMatch(/^https:\/\//)
    }
  })
})
