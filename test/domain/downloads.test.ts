import { describe, expect, test } from 'bun:test'
import { type DownloadableEntry, hubSource, isSafeRelativePath, pullSource } from '../../src/domain/downloads'

// docs/api.md §7 pull_models: what a worker fetches for an entry, by runtime.

const D = 'a'.repeat(64)
const entry = (o: Partial<DownloadableEntry> = {}): DownloadableEntry => ({
  digest: null,
  source_type: 'huggingface',
  source_ref: 'owner/repo',
  source_revision: null,
  artifact_files: [],
  ...o,
})

describe('hub downloads', () => {
  test('artifact files under a two-segment repository id', () => {
    const files = [{ path: 'sub/a.gguf', sha256: D, size_bytes: 3 }]
    expect(hubSource(entry({ artifact_files: files, source_revision: 'abc123' }))).toEqual({
      source_type: 'huggingface',
      source_ref: 'owner/repo',
      source_revision: 'abc123',
      files,
    })
  })

  test('a single file named after the repository id, pinned by the digest', () => {
    expect(hubSource(entry({ source_ref: 'Org.x/My_Repo-GGUF/q/m.gguf', digest: D }))).toEqual({
      source_type: 'huggingface',
      source_ref: 'Org.x/My_Repo-GGUF',
      source_revision: 'main',
      files: [{ path: 'q/m.gguf', sha256: D, size_bytes: null }],
    })
  })

  test('nothing to fetch or nothing to verify: none', () => {
    expect(hubSource(entry())).toBeNull()
    expect(hubSource(entry({ source_ref: 'owner/repo/m.gguf' }))).toBeNull()
    expect(hubSource(entry({ source_type: 'ollama', digest: D, source_ref: 'o/r/m.gguf' }))).toBeNull()
    expect(hubSource(entry({ source_ref: null, digest: D }))).toBeNull()
    expect(
      hubSource(entry({ source_ref: 'o/r/x', artifact_files: [{ path: 'a', sha256: D, size_bytes: 1 }] })),
    ).toBeNull()
  })

  test('a name or path that could leave its directory is refused', () => {
    for (const ref of [
      '../r/m.gguf',
      'o/../m.gguf',
      'o/r/../m.gguf',
      'o/r//m.gguf',
      '/o/r/m.gguf',
      'o/r/a\\b',
    ])
      expect(hubSource(entry({ source_ref: ref, digest: D }))).toBeNull()
    expect(isSafeRelativePath('a/b.gguf')).toBe(true)
    for (const p of ['', '/a', 'a/', './a', 'a/../b', 'a\\b', 'a\0b'])
      expect(isSafeRelativePath(p)).toBe(false)
  })

  test('Ollama pulls from its registry whatever the source; other runtimes need a hub source', () => {
    const ollamaOnly = entry({ source_type: 'ollama', source_ref: 'registry.ollama.ai/library/m:1' })
    expect(pullSource('ollama', ollamaOnly)).toEqual({
      source_type: 'ollama',
      source_ref: 'registry.ollama.ai/library/m:1',
      source_revision: null,
      files: [],
    })
    expect(pullSource('llama.cpp', ollamaOnly)).toBeNull()
    expect(pullSource('vllm', entry({ source_ref: 'o/r/m.gguf', digest: D }))?.source_ref).toBe('o/r')
  })
})
