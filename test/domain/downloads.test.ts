import { describe, expect, test } from 'bun:test'
import {
  backedOff,
  backOffDownload,
  DOWNLOAD_BACKOFF_FIRST_SECONDS,
  DOWNLOAD_BACKOFF_MAX_SECONDS,
  type DownloadableEntry,
  downloadBackoffSeconds,
  hubSource,
  isSafeRelativePath,
  pullPin,
  pullSource,
} from '../../src/domain/downloads'

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

describe('the back-off after a failed download (docs/api.md §7 model-progress)', () => {
  test('10 minutes, doubling with each failure in a row, to 24 hours', () => {
    expect(DOWNLOAD_BACKOFF_FIRST_SECONDS).toBe(600)
    expect([1, 2, 3, 4, 8, 9, 50].map(downloadBackoffSeconds)).toEqual([
      600,
      1200,
      2400,
      4800,
      76_800,
      DOWNLOAD_BACKOFF_MAX_SECONDS,
      DOWNLOAD_BACKOFF_MAX_SECONDS,
    ])
  })

  test('counted per pin: a failure of the same download grows it, of another starts over; a refusal keeps the count', () => {
    const first = backOffDownload(null, 'p1', 1000)
    expect(first).toEqual({ pin: 'p1', failures: 1, retry_at: 1600 })
    const second = backOffDownload(first, 'p1', 2000)
    expect(second).toEqual({ pin: 'p1', failures: 2, retry_at: 3200 })
    expect(backOffDownload(second, 'p2', 2000)).toEqual({ pin: 'p2', failures: 1, retry_at: 2600 })
    expect(backOffDownload(second, 'p1', 2000, false)).toEqual({ pin: 'p1', failures: 2, retry_at: 3200 })
    expect(backOffDownload(null, 'p1', 2000, false)).toEqual({ pin: 'p1', failures: 1, retry_at: 2600 })
  })

  test('backed off only from the same pin, until retry_at', () => {
    const b = { pin: 'p1', failures: 1, retry_at: 1600 }
    expect(backedOff(b, 'p1', 1599)).toBe(true)
    expect(backedOff(b, 'p1', 1600)).toBe(false)
    expect(backedOff(b, 'p2', 1000)).toBe(false)
    expect(backedOff(null, 'p1', 1000)).toBe(false)
  })

  test('the pin changes with anything the download fetches or checks, and only then', () => {
    const ask = {
      runtime_model_id: 'm',
      digest: 'a'.repeat(64),
      source_type: 'huggingface',
      source_ref: 'o/r',
      source_revision: 'main',
      files: [{ path: 'm.gguf', sha256: 'a'.repeat(64), size_bytes: 10 }],
    }
    const pin = pullPin(ask)
    expect(pullPin({ ...ask })).toBe(pin)
    for (const changed of [
      { ...ask, digest: 'b'.repeat(64) },
      { ...ask, source_revision: 'v2' },
      { ...ask, files: [{ ...ask.files[0]!, sha256: 'b'.repeat(64) }] },
      { ...ask, runtime_model_id: 'n' },
    ])
      expect(pullPin(changed)).not.toBe(pin)
  })
})
