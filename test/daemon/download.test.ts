import { afterEach, describe, expect, test } from 'bun:test'
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import { manualTimers } from '../../src/daemon/backoff'
import {
  type DownloadProgress,
  type DownloadRequest,
  downloadModel,
  INTERRUPTIONS_PER_RETRY,
  LOCK_STALE_MS,
  type ModelLayout,
  modelsDirLayout,
  PARTIAL_RECLAIM_MS,
  pullFromHub,
  reclaimPartials,
  statfsFreeBytes,
} from '../../src/daemon/download'
import { LaunchedEngine } from '../../src/daemon/engines/launched'
import { DigestCache } from '../../src/daemon/runtimes/digests'
import { ManagedRuntime } from '../../src/daemon/runtimes/managed'
import type { PullProgress } from '../../src/daemon/runtimes/types'
import { StateDir } from '../../src/daemon/state'
import { type StandInHub, seededBytes, sha256Of, startStandInHub } from '../helpers/hub'
import { memoryEngine } from '../helpers/memory-engine'
import { capturedLogLines, rememberSecret } from '../helpers/secrets'
import { until } from '../helpers/until'

// The downloader (src/daemon/download.ts) against the stand-in hub (test/helpers/hub.ts).

const REPO = 'owner/tiny-GGUF'
const cleanups: (() => void)[] = []
afterEach(() => {
  for (const c of cleanups.splice(0)) c()
})

function hub(o: Parameters<typeof startStandInHub>[0] = {}) {
  const h = startStandInHub(o)
  cleanups.push(() => h.stop())
  return h
}
const modelsDir = () => mkdtempSync(join(tmpdir(), 'gk-models-'))
/** Every name under `dir`, recursively, hidden ones included. */
const tree = (dir: string) => readdirSync(dir, { recursive: true }).map(String).sort()

function request(h: StandInHub, layout: ModelLayout, o: Partial<DownloadRequest> = {}) {
  const progress: DownloadProgress[] = []
  const req: DownloadRequest = {
    hub: { url: h.url },
    repo: REPO,
    revision: 'main',
    layout,
    maxBytes: 1e9,
    backoff: { baseMs: 1, maxMs: 5 },
    retries: 3,
    onProgress: (p) => progress.push(p),
    ...o,
  }
  return { req, progress }
}

describe('a good download', () => {
  test('one GGUF: verified, renamed into place as <name>.gguf, progress downloading → verifying', async () => {
    const h = hub()
    const bytes = seededBytes(3_000_000)
    const file = h.put(REPO, 'quants/tiny-Q8_0.gguf', bytes)
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'tiny-q8_0', [
      { path: 'quants/tiny-Q8_0.gguf', sha256: file.sha256, size_bytes: file.size },
    ])
    expect(layout).toMatchObject({ kind: 'file', dest: join(dir, 'tiny-q8_0.gguf') })
    const { req, progress } = request(h, layout)
    expect(await downloadModel(req)).toEqual({
      bytes: bytes.length,
      files: [{ path: join(dir, 'tiny-q8_0.gguf'), sha256: file.sha256 }],
    })
    expect(tree(dir)).toEqual(['tiny-q8_0.gguf'])
    expect(sha256Of(readFileSync(join(dir, 'tiny-q8_0.gguf')))).toBe(file.sha256)
    // downloading…, then verifying once, at the end, with every byte in.
    const statuses = progress.map((p) => p.status)
    expect(statuses.indexOf('verifying')).toBe(statuses.length - 1)
    expect(statuses.slice(0, -1).every((s) => s === 'downloading')).toBe(true)
    expect(statuses.length).toBeGreaterThan(2)
    const done = progress.map((p) => p.completed_bytes)
    for (let i = 1; i < done.length; i++) expect(done[i]!).toBeGreaterThanOrEqual(done[i - 1]!)
    expect(progress[0]).toEqual({ status: 'downloading', completed_bytes: 0, total_bytes: bytes.length })
    expect(progress.at(-1)).toEqual({
      status: 'verifying',
      completed_bytes: bytes.length,
      total_bytes: bytes.length,
    })
    // One plain GET: nothing asked twice.
    expect(h.requests.map((r) => [r.method, r.range, r.status])).toEqual([['GET', null, 200]])
  })

  test('several files land together in <name>/ (flat: by file name); a size the catalogue omits comes from the hub', async () => {
    const h = hub()
    const weights = h.put(REPO, 'vis/vis-Q4_K_M.gguf', seededBytes(500_000, 2))
    const proj = h.put(REPO, 'mmproj/mmproj-vis-F16.gguf', seededBytes(200_000, 3))
    const dir = modelsDir()
    const layout = modelsDirLayout(
      dir,
      'vis-q4_k_m',
      [
        { path: 'vis/vis-Q4_K_M.gguf', sha256: weights.sha256, size_bytes: weights.size },
        {
          path: 'mmproj/mmproj-vis-F16.gguf',
          sha256: `sha256:${proj.sha256.toUpperCase()}`,
          size_bytes: null,
        },
      ],
      { flat: true },
    )
    const { req, progress } = request(h, layout)
    await downloadModel(req)
    expect(tree(dir)).toEqual(['vis-q4_k_m', 'vis-q4_k_m/mmproj-vis-F16.gguf', 'vis-q4_k_m/vis-Q4_K_M.gguf'])
    expect(sha256Of(readFileSync(join(dir, 'vis-q4_k_m/mmproj-vis-F16.gguf')))).toBe(proj.sha256)
    expect(progress[0]!.total_bytes).toBe(700_000)
    expect(h.requests.map((r) => r.method)).toEqual(['HEAD', 'GET', 'GET'])
    // Kept at their repository paths when not flat.
    const deep = modelsDirLayout(dir, 'm', [
      { path: 'a/config.json', sha256: weights.sha256, size_bytes: 1 },
      { path: 'b/config.json', sha256: weights.sha256, size_bytes: 1 },
    ])
    expect(deep.files.map((f) => f.rel)).toEqual(['a/config.json', 'b/config.json'])
    expect(() => modelsDirLayout(dir, 'm', deep.files, { flat: true })).toThrow(
      'two files would land as "config.json"',
    )
  })

  test('a launched engine’s model is always a directory, even of one GGUF (LaunchedEngine.layoutFor)', () => {
    const models = mkdtempSync(join(tmpdir(), 'gk-launched-layout-'))
    try {
      const engine = new LaunchedEngine({
        engine: 'vllm',
        state: new StateDir(join(models, '.state')),
        modelsDir: models,
        command: 'vllm serve {model_path} --port {port}',
      })
      const one = engine.layoutFor('org/m', [{ path: 'm.gguf', sha256: 'a'.repeat(64), size_bytes: 1 }])
      expect(one).toMatchObject({ kind: 'dir', dest: join(models, 'org/m'), files: [{ rel: 'm.gguf' }] })
      // The llama.cpp router's rule, for contrast: one GGUF is a file named after the model.
      expect(modelsDirLayout(models, 'm', one.files).kind).toBe('file')
    } finally {
      rmSync(models, { recursive: true, force: true })
    }
  })

  test('a name or path that would leave the models directory is refused', () => {
    const f = { path: 'm.gguf', sha256: 'a'.repeat(64), size_bytes: 1 }
    expect(() => modelsDirLayout('/m', '../x', [f])).toThrow('cannot be a path under the models directory')
    expect(() => modelsDirLayout('/m', 'x', [{ ...f, path: 'a/../../b.gguf' }])).toThrow(
      'not a safe relative path',
    )
    expect(() => modelsDirLayout('/m', 'x', [])).toThrow('names no file')
  })
})

describe('resuming', () => {
  test('a connection cut mid-file continues with Range and If-Range: only the rest is fetched', async () => {
    const h = hub()
    const bytes = seededBytes(4_000_000, 4)
    const file = h.put(REPO, 'm.gguf', bytes)
    h.misbehave(REPO, 'm.gguf', { stopAt: 2_000_000, times: 'once' })
    const dir = modelsDir()
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    await downloadModel(req)
    expect(sha256Of(readFileSync(join(dir, 'm.gguf')))).toBe(file.sha256)
    expect(h.requests).toHaveLength(2)
    const [first, second] = h.requests
    expect(first).toMatchObject({ range: null, status: 200 })
    const kept = Number(/^bytes=(\d+)-$/.exec(second!.range ?? '')?.[1])
    // What arrived before the cut is kept (the client may lose the last bytes in flight).
    expect(kept).toBeGreaterThan(0)
    expect(kept).toBeLessThanOrEqual(2_000_000)
    expect(second).toMatchObject({ ifRange: `"${file.sha256}"`, status: 206 })
    expect(tree(dir)).toEqual(['m.gguf'])
  })

  test('a file that changed on the hub since the cut (another ETag) starts over', async () => {
    const h = hub()
    const old = seededBytes(3_000_000, 5)
    const oldFile = h.put(REPO, 'm.gguf', old)
    h.misbehave(REPO, 'm.gguf', { stopAt: 1_500_000, times: 'once' })
    const fresh = seededBytes(3_000_000, 6)
    const dir = modelsDir()
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', sha256: sha256Of(fresh), size_bytes: fresh.length }]),
      {
        // The first bytes of the old file arrive; then the hub publishes the new one.
        onProgress: (p) => {
          if (p.completed_bytes > 0 && h.requests.length === 1) h.put(REPO, 'm.gguf', fresh)
        },
      },
    )
    await downloadModel(req)
    expect(readFileSync(join(dir, 'm.gguf')).equals(Buffer.from(fresh))).toBe(true)
    // The resume named the old ETag; the hub answered the whole new file.
    expect(h.requests[1]).toMatchObject({ ifRange: `"${oldFile.sha256}"`, status: 200 })
  })

  test('a partial left by a stopped run is resumed: its prefix hashed, its ETag kept beside it', async () => {
    const h = hub()
    const bytes = seededBytes(4_000_000, 7)
    const file = h.put(REPO, 'm.gguf', bytes)
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }])
    const stop = new AbortController()
    const first = request(h, layout, {
      signal: stop.signal,
      onProgress: (p) => {
        if (p.completed_bytes > 0) stop.abort()
      },
    })
    await expect(downloadModel(first.req)).rejects.toThrow('the download was stopped')
    // Stopped, not failed: the partial (never a .gguf) and its ETag stay.
    expect(tree(dir)).toEqual(['.m.gguf.partial', '.m.gguf.partial.etag'])
    const kept = statSync(join(dir, '.m.gguf.partial')).size
    expect(kept).toBeGreaterThan(0)
    const second = request(h, layout)
    await downloadModel(second.req)
    expect(sha256Of(readFileSync(join(dir, 'm.gguf')))).toBe(file.sha256)
    expect(h.requests.at(-1)).toMatchObject({
      range: `bytes=${kept}-`,
      ifRange: `"${file.sha256}"`,
      status: 206,
    })
    expect(second.progress[0]!.completed_bytes).toBe(kept)
    expect(tree(dir)).toEqual(['m.gguf'])
  })
})

describe('failures leave nothing behind', () => {
  const failing = async (h: StandInHub, layout: ModelLayout, o: Partial<DownloadRequest> = {}) => {
    const { req, progress } = request(h, layout, o)
    const error = await downloadModel(req).then(
      () => null,
      (e: Error) => e,
    )
    expect(error).toBeInstanceOf(Error)
    return { error: error!.message, progress }
  }

  test('wrong bytes: the digest reason, no file', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(1_000_000, 8))
    h.misbehave(REPO, 'm.gguf', { wrongBytes: true })
    const dir = modelsDir()
    const { error, progress } = await failing(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    expect(error).toStartWith('sha256 of m.gguf is ')
    expect(error).toContain(`the catalogue's is ${file.sha256}`)
    expect(progress.some((p) => p.status === 'verifying')).toBe(false)
    expect(tree(dir)).toEqual([])
  })

  test('a second file with wrong bytes takes the first, verified one with it', async () => {
    const h = hub()
    const a = h.put(REPO, 'a.gguf', seededBytes(100_000, 9))
    const b = h.put(REPO, 'b.gguf', seededBytes(100_000, 10))
    h.misbehave(REPO, 'b.gguf', { wrongBytes: true })
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'two', [
      { path: 'a.gguf', ...a, size_bytes: a.size },
      { path: 'b.gguf', ...b, size_bytes: b.size },
    ])
    expect((await failing(h, layout)).error).toStartWith('sha256 of b.gguf')
    expect(tree(dir)).toEqual([])
  })

  test('a hub that sends a little each time and cuts again: failed after retries × INTERRUPTIONS_PER_RETRY, each retry logged with its reason and wait', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(100_000, 12))
    // Each response brings 1000 new bytes: no run of fruitless attempts ever reaches the retries.
    h.misbehave(REPO, 'm.gguf', { trickle: 1000, times: 'always' })
    const dir = modelsDir()
    const logFrom = capturedLogLines().length
    const { error } = await failing(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    const attempts = 3 * INTERRUPTIONS_PER_RETRY
    expect(error).toBe(
      `m.gguf: the connection ended early (interrupted ${attempts} times; ${attempts * 1000} of 100000 bytes had arrived)`,
    )
    expect(h.requests.filter((r) => r.method !== 'HEAD')).toHaveLength(attempts)
    const retried = capturedLogLines()
      .slice(logFrom)
      .map((l) => JSON.parse(l))
      .filter((r) => r.msg === 'download interrupted; resuming')
    expect(retried).toHaveLength(attempts - 1)
    expect(retried.every((r) => r.error === 'the connection ended early' && r.retry_in_ms >= 0)).toBe(true)
    expect(tree(dir)).toEqual([])
  })

  test('a hub that always stops halfway: failed after the retries, no partial', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(2_000_000, 11))
    h.misbehave(REPO, 'm.gguf', { stopAt: 1_000_000, times: 'always' })
    const dir = modelsDir()
    const { error } = await failing(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    expect(error).toContain('3 attempts in a row brought no new byte')
    // Every retry resumed where the last had stopped.
    expect(h.requests.slice(1).every((r) => r.range !== null)).toBe(true)
    expect(tree(dir)).toEqual([])
  })

  test('404 fails at once; 503 after the retries; neither leaves a file', async () => {
    const h = hub()
    const dir = modelsDir()
    const missing = await failing(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'gone.gguf', sha256: 'a'.repeat(64), size_bytes: 10 }]),
    )
    expect(missing.error).toBe('the hub answered 404 for gone.gguf (owner/tiny-GGUF@main)')
    expect(h.requests).toHaveLength(1)
    const file = h.put(REPO, 'sick.gguf', seededBytes(1000))
    h.misbehave(REPO, 'sick.gguf', { status: 503 })
    const sick = await failing(
      h,
      modelsDirLayout(dir, 's', [{ path: 'sick.gguf', ...file, size_bytes: file.size }]),
    )
    expect(sick.error).toBe('sick.gguf: the hub answered 503 (3 attempts in a row brought no new byte)')
    expect(tree(dir)).toEqual([])
  })

  test('a hub serving another size than the catalogue says is refused before the bytes', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(1000))
    const dir = modelsDir()
    const { error } = await failing(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', sha256: file.sha256, size_bytes: 999 }]),
    )
    expect(error).toBe('the hub serves 1000 bytes of m.gguf, the catalogue says 999')
    expect(tree(dir)).toEqual([])
  })
})

describe('refused before anything is fetched', () => {
  test('over --max-download-gb', async () => {
    const h = hub()
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'm', [{ path: 'm.gguf', sha256: 'a'.repeat(64), size_bytes: 3e9 }])
    const { req } = request(h, layout, { maxBytes: 2e9 })
    await expect(downloadModel(req)).rejects.toThrow(
      'the download is 3.00 GB, over --max-download-gb (2.00 GB)',
    )
    expect(h.requests).toEqual([])
    expect(tree(dir)).toEqual([])
  })

  test('not enough free disk where the model lands (statfs of the target)', async () => {
    const h = hub()
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'm', [{ path: 'm.gguf', sha256: 'a'.repeat(64), size_bytes: 5e8 }])
    const asked: string[] = []
    const { req } = request(h, layout, {
      freeBytes: (path) => {
        asked.push(path)
        return 1e8
      },
    })
    await expect(downloadModel(req)).rejects.toThrow(
      `not enough free disk in ${dir}: the download needs 0.50 GB more, 0.10 GB free`,
    )
    expect(asked).toEqual([dir])
    expect(h.requests).toEqual([])
    // The default asks the filesystem itself.
    expect(statfsFreeBytes(dir)).toBeGreaterThan(0)
  })
})

describe('the hub token', () => {
  test('sent as a bearer token, never logged nor in an error', async () => {
    const token = `hf_${'T'.repeat(30)}`
    rememberSecret(token)
    const h = hub({ token })
    const file = h.put(REPO, 'm.gguf', seededBytes(1000))
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: null }])
    const { req } = request(h, layout, { hub: { url: h.url, token } })
    await downloadModel(req)
    expect(h.requests.map((r) => r.authorization)).toEqual([`Bearer ${token}`, `Bearer ${token}`])
    const denied = request(h, modelsDirLayout(dir, 'n', [{ path: 'm.gguf', ...file, size_bytes: 1000 }]), {
      hub: { url: h.url, token: `${token}x` },
    })
    const error = await downloadModel(denied.req).catch((e: Error) => e.message)
    expect(error).toBe('the hub answered 401 for m.gguf (owner/tiny-GGUF@main)')
    expect(capturedLogLines().some((l) => l.includes(token))).toBe(false)
  })
})

describe('a pull_models ask (docs/api.md §7)', () => {
  test('its repository, revision and files drive the download', async () => {
    const h = hub()
    const file = h.put(REPO, 'q/tiny-Q8_0.gguf', seededBytes(10_000), 'v1')
    const dir = modelsDir()
    const out = await pullFromHub(
      {
        catalogue_id: 'tiny-q80',
        runtime: 'llama.cpp',
        runtime_model_id: 'tiny-q8_0',
        digest: file.sha256,
        size_gb: 0.00001,
        source_type: 'huggingface',
        source_ref: REPO,
        source_revision: 'v1',
        files: [{ path: 'q/tiny-Q8_0.gguf', sha256: file.sha256, size_bytes: null }],
      },
      { layout: (name, files) => modelsDirLayout(dir, name, files), hub: { url: h.url }, maxDownloadGb: 1 },
    )
    expect(out).toEqual({
      bytes: 10_000,
      dest: join(dir, 'tiny-q8_0.gguf'),
      files: [{ path: join(dir, 'tiny-q8_0.gguf'), sha256: file.sha256 }],
    })
    expect(existsSync(out.dest)).toBe(true)
    await expect(
      pullFromHub(
        { catalogue_id: 'x', runtime: 'llama.cpp', runtime_model_id: 'x', source_type: 'ollama', files: [] },
        { layout: (name, files) => modelsDirLayout(dir, name, files), hub: { url: h.url }, maxDownloadGb: 1 },
      ),
    ).rejects.toThrow('catalogue entry x names no hub download')
  })
})

describe('a managed runtime’s pull (src/daemon/runtimes/managed.ts)', () => {
  test('the engine lists the model placed, even while a look at it begun before (a heartbeat’s) is under way', async () => {
    const h = hub()
    const file = h.put(REPO, 'tiny-Q8_0.gguf', seededBytes(10_000))
    const dir = modelsDir()
    const engine = memoryEngine([], { modelsDir: dir })
    const state = new StateDir(mkdtempSync(join(tmpdir(), 'gk-state-')))
    cleanups.push(() => rmSync(state.dir, { recursive: true, force: true }))
    const runtime = new ManagedRuntime(engine, new DigestCache(state), {
      state,
      room: async () => ({ budget_gb: null }),
      downloads: { hub: { url: h.url }, maxDownloadGb: 1, modelsDir: dir },
    })
    // A heartbeat's snapshot reads the engine before the file lands, and answers after.
    const held = engine.holdStatus()
    const heartbeat = runtime.snapshot()
    await held.started
    const progress: PullProgress[] = []
    const pulled = runtime.pull!(
      {
        catalogue_id: 'tiny-q80',
        runtime: 'llama.cpp',
        runtime_model_id: 'tiny',
        digest: file.sha256,
        source_type: 'huggingface',
        source_ref: REPO,
        files: [{ path: 'tiny-Q8_0.gguf', sha256: file.sha256, size_bytes: file.size }],
      },
      (p) => progress.push(p),
    )
    // Placed: the pull asks the engine at once (nothing is awaited between the two but promises).
    await until('the model placed', () => existsSync(join(dir, 'tiny.gguf')))
    held.release()
    // That look did not see it; the pull's own look, begun after, does.
    expect((await heartbeat).models).toEqual([])
    await pulled
    expect(progress.at(-1)?.status).toBe('verifying')
    expect((await runtime.snapshot()).models).toEqual(['tiny'])
  })
})

describe('Accept-Encoding: identity (docs/worker.md "Downloads")', () => {
  test('a hub that compresses when allowed sends the bytes as stored: the size check holds', async () => {
    const h = hub({ compress: true })
    // Text compresses well: gzipped, its Content-Length would be far below the catalogue's size.
    const config = new TextEncoder().encode(JSON.stringify({ architectures: ['X'], pad: 'a'.repeat(50_000) }))
    const file = h.put(REPO, 'config.json', config)
    const weights = h.put(REPO, 'model.safetensors', seededBytes(10_000, 40))
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'org/m', [
      { path: 'config.json', sha256: file.sha256, size_bytes: file.size },
      { path: 'model.safetensors', sha256: weights.sha256, size_bytes: null },
    ])
    await downloadModel(request(h, layout).req)
    expect(readFileSync(join(dir, 'org/m/config.json')).equals(Buffer.from(config))).toBe(true)
    expect(h.requests.map((r) => [r.method, r.acceptEncoding, r.status])).toEqual([
      ['HEAD', 'identity', 200],
      ['GET', 'identity', 200],
      ['GET', 'identity', 200],
    ])
  })
})

describe('a destination already there is hashed, never replaced', () => {
  test("one file with the catalogue's bytes is the download: nothing fetched, the file untouched", async () => {
    const h = hub()
    const bytes = seededBytes(300_000, 41)
    const file = h.put(REPO, 'm.gguf', bytes)
    const dir = modelsDir()
    writeFileSync(join(dir, 'm.gguf'), bytes)
    const before = statSync(join(dir, 'm.gguf'))
    const hashed: string[] = []
    const { req, progress } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
      {
        hash: async (path) => {
          hashed.push(path)
          return sha256Of(readFileSync(path))
        },
      },
    )
    expect(await downloadModel(req)).toEqual({
      bytes: 0,
      files: [{ path: join(dir, 'm.gguf'), sha256: file.sha256 }],
      found: true,
    })
    expect(hashed).toEqual([join(dir, 'm.gguf')])
    expect(h.requests).toEqual([])
    expect(statSync(join(dir, 'm.gguf'))).toMatchObject({ ino: before.ino, mtimeMs: before.mtimeMs })
    expect(progress.map((p) => p.status)).toEqual(['verifying', 'verifying'])
    expect(tree(dir)).toEqual(['m.gguf'])
  })

  test('a long hash of what is there keeps reporting verifying, so the ask never lapses for silence (on the injected clock)', async () => {
    const h = hub()
    const bytes = seededBytes(1000, 49)
    const file = h.put(REPO, 'm.gguf', bytes)
    const dir = modelsDir()
    writeFileSync(join(dir, 'm.gguf'), bytes)
    const timers = manualTimers()
    const { req, progress } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
      {
        timers,
        // A hash that ends only once the clock has moved past three reports (5 s each by default).
        hash: async (path) => {
          for (let i = 1; i <= 3; i++) {
            expect(progress).toHaveLength(i)
            timers.advance(5000)
            await until('a report as the clock passes 5 s', () => progress.length === i + 1)
          }
          return sha256Of(readFileSync(path))
        },
      },
    )
    expect((await downloadModel(req)).found).toBe(true)
    expect(progress).toHaveLength(5)
    expect(progress.every((p) => p.status === 'verifying')).toBe(true)
  })

  test('other bytes there: the download fails saying so, and the file stays as it was', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(300_000, 42))
    const dir = modelsDir()
    const theirs = seededBytes(1000, 43)
    writeFileSync(join(dir, 'm.gguf'), theirs)
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    await expect(downloadModel(req)).rejects.toThrow(
      `${join(dir, 'm.gguf')} is already there and is not the catalogue's: its sha256 is ${sha256Of(theirs)}, the catalogue's ${file.sha256}; it is left as it is`,
    )
    expect(h.requests).toEqual([])
    expect(readFileSync(join(dir, 'm.gguf')).equals(Buffer.from(theirs))).toBe(true)
    expect(tree(dir)).toEqual(['m.gguf'])
  })

  test('a directory: every file matching is the download (what else is in it stays); a file missing fails and touches nothing', async () => {
    const h = hub()
    const a = h.put(REPO, 'a.safetensors', seededBytes(5000, 44))
    const b = h.put(REPO, 'config.json', seededBytes(100, 45))
    const dir = modelsDir()
    const files = [
      { path: 'a.safetensors', ...a, size_bytes: a.size },
      { path: 'config.json', ...b, size_bytes: b.size },
    ]
    mkdirSync(join(dir, 'org/m'), { recursive: true })
    writeFileSync(join(dir, 'org/m/a.safetensors'), seededBytes(5000, 44))
    writeFileSync(join(dir, 'org/m/notes.txt'), 'mine')
    const missing = request(h, modelsDirLayout(dir, 'org/m', files))
    await expect(downloadModel(missing.req)).rejects.toThrow(
      `${join(dir, 'org/m')} is already there without config.json; it is left as it is`,
    )
    expect(tree(dir)).toEqual(['org', 'org/m', 'org/m/a.safetensors', 'org/m/notes.txt'])
    writeFileSync(join(dir, 'org/m/config.json'), seededBytes(100, 45))
    const whole = request(h, modelsDirLayout(dir, 'org/m', files))
    expect((await downloadModel(whole.req)).found).toBe(true)
    expect(readFileSync(join(dir, 'org/m/notes.txt'), 'utf8')).toBe('mine')
    expect(h.requests).toEqual([])
  })

  test('a model that appears while the files arrive is kept; ours is dropped', async () => {
    const dir = modelsDir()
    const bytes = seededBytes(400_000, 46)
    let ino: number | null = null
    // Someone copies the model in as the daemon starts fetching it.
    const h = hub({
      onRequest: () => {
        if (ino !== null) return
        writeFileSync(join(dir, 'm.gguf'), bytes)
        ino = statSync(join(dir, 'm.gguf')).ino
      },
    })
    const file = h.put(REPO, 'm.gguf', bytes)
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    const out = await downloadModel(req)
    expect(out.found).toBe(true)
    expect(h.requests).toHaveLength(1)
    expect(tree(dir)).toEqual(['m.gguf'])
    // Theirs, not ours renamed over it: the file the copy wrote.
    expect(statSync(join(dir, 'm.gguf')).ino).toBe(ino!)
  })

  test('one that appears with other bytes stays, and the download fails saying so', async () => {
    const dir = modelsDir()
    const other = seededBytes(10, 48)
    const h = hub({ onRequest: () => writeFileSync(join(dir, 'm.gguf'), other, { flag: 'wx' }) })
    const file = h.put(REPO, 'm.gguf', seededBytes(100_000, 47))
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    await expect(downloadModel(req)).rejects.toThrow("is already there and is not the catalogue's")
    expect(readFileSync(join(dir, 'm.gguf')).equals(Buffer.from(other))).toBe(true)
    expect(tree(dir)).toEqual(['m.gguf'])
  })
})

describe('the lock of a partial download (two daemons on one models directory)', () => {
  const lockOf = (dir: string, name: string) => join(dir, `.${name}.partial.lock`)
  const deadPid = () => Bun.spawnSync(['true']).pid

  test('held while the files are written (pid, host, start), released after', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(2_000_000, 50))
    const dir = modelsDir()
    let seen: any = null
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
      {
        onProgress: (p) => {
          if (p.status === 'downloading' && !seen)
            seen = JSON.parse(readFileSync(lockOf(dir, 'm.gguf'), 'utf8'))
        },
      },
    )
    await downloadModel(req)
    expect(seen).toEqual({ pid: process.pid, host: hostname(), started_at: expect.any(String) })
    expect(tree(dir)).toEqual(['m.gguf'])
  })

  test("a live holder's lock: nothing fetched, its partial and lock untouched, the holder named", async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(1000, 51))
    const dir = modelsDir()
    const partial = join(dir, '.m.gguf.partial')
    writeFileSync(partial, 'half')
    // Another host's daemon, refreshed just now.
    const lock = JSON.stringify({ pid: 4242, host: 'gpu-b', started_at: '2026-01-01T00:00:00.000Z' })
    writeFileSync(lockOf(dir, 'm.gguf'), lock)
    const { req } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
    )
    await expect(downloadModel(req)).rejects.toThrow(
      `another daemon is downloading into ${partial} (pid 4242 on gpu-b, since 2026-01-01T00:00:00.000Z); it is not fetched twice`,
    )
    expect(h.requests).toEqual([])
    expect(readFileSync(partial, 'utf8')).toBe('half')
    expect(readFileSync(lockOf(dir, 'm.gguf'), 'utf8')).toBe(lock)
  })

  test('on the injected clock: the lock is refreshed every minute while a stalled response waits, and the stall is cut when the clock passes stallMs', async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(2000, 53))
    h.misbehave(REPO, 'm.gguf', { stallAt: 1000, times: 'once' })
    const dir = modelsDir()
    const timers = manualTimers()
    const { req, progress } = request(
      h,
      modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }]),
      { timers, stallMs: 120_000 },
    )
    let settled = false
    const done = downloadModel(req).finally(() => {
      settled = true
    })
    await until('the first 1000 bytes', () => progress.some((p) => p.completed_bytes === 1000))
    const lock = lockOf(dir, 'm.gguf')
    const old = new Date(Date.now() - 30 * 60_000)
    utimesSync(lock, old, old)
    // A minute on the clock: the lock is refreshed, and the response (silent for 60 s of 120) goes on.
    timers.advance(60_000)
    await until('the lock refreshed', () => statSync(lock).mtimeMs > old.getTime() + 60_000)
    expect(settled).toBe(false)
    expect(h.requests).toHaveLength(1)
    // Past 120 s of silence the response is cut, and the resume fetches the rest.
    const cut = (l: string) => l.includes('download interrupted; resuming') && l.includes('no byte for 120 s')
    timers.advance(61_000)
    await until('the stall cut', () => capturedLogLines().some(cut))
    timers.advance(1000)
    expect((await done).bytes).toBe(2000)
    expect(h.requests.map((r) => r.range)).toEqual([null, 'bytes=1000-'])
  })

  test("a dead holder's lock is taken over: its process gone on this host, or not refreshed for LOCK_STALE_MS", async () => {
    const h = hub()
    const file = h.put(REPO, 'm.gguf', seededBytes(1000, 52))
    const dir = modelsDir()
    const layout = modelsDirLayout(dir, 'm', [{ path: 'm.gguf', ...file, size_bytes: file.size }])
    writeFileSync(
      lockOf(dir, 'm.gguf'),
      JSON.stringify({ pid: deadPid(), host: hostname(), started_at: 'x' }),
    )
    await downloadModel(request(h, layout).req)
    expect(tree(dir)).toEqual(['m.gguf'])

    const other = modelsDirLayout(dir, 'n', [{ path: 'm.gguf', ...file, size_bytes: file.size }])
    writeFileSync(lockOf(dir, 'n.gguf'), JSON.stringify({ pid: 1, host: 'gpu-b', started_at: 'x' }))
    const old = new Date(Date.now() - LOCK_STALE_MS - 60_000)
    utimesSync(lockOf(dir, 'n.gguf'), old, old)
    await downloadModel(request(h, other).req)
    expect(tree(dir)).toEqual(['m.gguf', 'n.gguf'])
  })
})

describe('reclaiming partial downloads nobody finished', () => {
  test('after PARTIAL_RECLAIM_MS unwritten and unlocked; never a live one, nor a name the downloader did not make', () => {
    const dir = modelsDir()
    const now = Date.now()
    const age = (p: string, ms: number) => {
      const t = new Date(now - ms)
      utimesSync(p, t, t)
    }
    const old = PARTIAL_RECLAIM_MS + 60_000
    // An old single-file partial with its ETag: reclaimed.
    writeFileSync(join(dir, '.a.gguf.partial'), 'x')
    writeFileSync(join(dir, '.a.gguf.partial.etag'), '"e"')
    age(join(dir, '.a.gguf.partial'), old)
    age(join(dir, '.a.gguf.partial.etag'), old)
    // An old directory partial, nested as a repo id nests, one of its files old too: reclaimed.
    mkdirSync(join(dir, 'org/.m.partial'), { recursive: true })
    writeFileSync(join(dir, 'org/.m.partial/w.safetensors.partial'), 'x')
    age(join(dir, 'org/.m.partial/w.safetensors.partial'), old)
    age(join(dir, 'org/.m.partial'), old)
    // Written to recently: kept.
    writeFileSync(join(dir, '.b.gguf.partial'), 'x')
    // Old, but a live daemon holds its lock: kept.
    writeFileSync(join(dir, '.c.gguf.partial'), 'x')
    age(join(dir, '.c.gguf.partial'), old)
    writeFileSync(join(dir, '.c.gguf.partial.lock'), JSON.stringify({ pid: process.pid, host: hostname() }))
    // Old, locked by a daemon on another host that refreshes its lock (a shared disk): kept.
    writeFileSync(join(dir, '.d.gguf.partial'), 'x')
    age(join(dir, '.d.gguf.partial'), old)
    writeFileSync(join(dir, '.d.gguf.partial.lock'), JSON.stringify({ pid: 1, host: 'gpu-07.lab' }))
    // Old, its lock from another host not refreshed since (a holder gone): reclaimed, lock and all.
    writeFileSync(join(dir, '.e.gguf.partial'), 'x')
    age(join(dir, '.e.gguf.partial'), old)
    writeFileSync(join(dir, '.e.gguf.partial.lock'), JSON.stringify({ pid: 1, host: 'gpu-08.lab' }))
    age(join(dir, '.e.gguf.partial.lock'), old)
    // Not of the downloader's making: never touched, however old.
    writeFileSync(join(dir, '.cache'), 'x')
    writeFileSync(join(dir, 'notes.partial'), 'x')
    age(join(dir, '.cache'), old)
    age(join(dir, 'notes.partial'), old)

    expect(reclaimPartials(dir, { nowMs: now }).sort()).toEqual([
      join(dir, '.a.gguf.partial'),
      join(dir, '.e.gguf.partial'),
      join(dir, 'org/.m.partial'),
    ])
    expect(tree(dir)).toEqual([
      '.b.gguf.partial',
      '.c.gguf.partial',
      '.c.gguf.partial.lock',
      '.cache',
      '.d.gguf.partial',
      '.d.gguf.partial.lock',
      'notes.partial',
      'org',
    ])
  })
})
