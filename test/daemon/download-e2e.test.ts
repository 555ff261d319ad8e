import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { tinyModel } from '../../scripts/llama-server'
import type { TestServer } from '../helpers/app'
import { startTestServer } from '../helpers/app'
import { type StandInHub, startStandInHub } from '../helpers/hub'
import { withRealEngine } from '../helpers/llama'
import { managedFleet, managedOptions, runManaged, sha256, stopDaemon } from '../helpers/managed'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// End to end (docs/api.md §7 pull_models, docs/worker.md "Downloads"): a daemon running the real
// llama-server router over a models directory that holds model A only, the real control plane, and
// a catalogue entry C that no worker has, whose single GGUF is on the stand-in hub. A batch for C
// waits; the server asks the idle daemon to download C; the daemon fetches it from the hub (the
// connection cut once halfway, so the download resumes), verifies it, renames it into the models
// directory, the router lists it, the next heartbeat's inventory carries it, and the batch runs.

const REPO = 'gridkeep/tiny-charlie-GGUF'
const FILE = 'quants/tiny-charlie-F32.gguf'

withRealEngine('a managed daemon downloads a catalogue entry it lacks, then serves it', (engine) => {
  let server: TestServer
  let hub: StandInHub
  let modelsDir: string
  let charlie: Uint8Array
  const dir = mkdtempSync(join(tmpdir(), 'gk-download-e2e-'))

  beforeAll(async () => {
    modelsDir = join(dir, 'models')
    mkdirSync(modelsDir)
    const alpha = tinyModel(21)
    writeFileSync(join(modelsDir, 'alpha.gguf'), alpha)
    charlie = tinyModel(23)
    hub = startStandInHub()
    hub.put(REPO, FILE, charlie)
    hub.misbehave(REPO, FILE, { stopAt: Math.floor(charlie.length / 2), times: 'once' })
    const entry = (id: string, name: string, digest: string, source: string[]) => [
      `  - id: ${id}`,
      '    task_type: chat',
      '    quantization: F32',
      '    vram_gb: 1',
      '    size_gb: 0.01',
      `    digest: sha256:${digest}`,
      ...source,
      '    serving_profiles:',
      '      - runtime: llama.cpp',
      `        runtime_model_id: ${name}`,
      '        params: { threads: 1, ctx_size: 1024 }',
    ]
    const manifest = join(dir, 'models.yaml')
    writeFileSync(
      manifest,
      [
        'models:',
        ...entry('tiny-alpha-f32', 'alpha', sha256(alpha), []),
        ...entry('tiny-charlie-f32', 'charlie', sha256(charlie), [
          '    source_type: huggingface',
          `    source_ref: ${REPO}/${FILE}`,
        ]),
      ].join('\n'),
    )
    // Heartbeats every second (a quarter of the timeout): the ask comes in a heartbeat's answer.
    server = await startTestServer({
      CATALOGUE_PATH: manifest,
      LOG_LEVEL: 'info',
      HEARTBEAT_TIMEOUT_SECONDS: '4',
    })
  })

  afterAll(async () => {
    hub?.stop()
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  test('download C (verified, resumed after a cut), the router lists it, and C serves the batch', async () => {
    const f = await managedFleet(server)
    const d = runManaged(
      managedOptions(server.url, f.key, engine, modelsDir, { max_download_gb: 1, hub_url: hub.url }),
    )
    try {
      // The worker holds A only; C is nowhere.
      const before = await until('the worker with A on disk', async () => {
        const m = await f.models(d.agent.id)
        return m.alpha?.state === 'on_disk' ? m : null
      })
      expect(before.charlie).toBeUndefined()
      expect((await f.row(d.agent.id)).activity).toBe('idle')

      const id = await f.submit('tiny-charlie-f32', 3)
      const batch = await f.completed(id)
      expect(batch.request_counts).toEqual({ total: 3, completed: 3, failed: 0 })
      const out = await f.outputLines(batch)
      expect(out.every((l) => l.response.status_code === 200)).toBe(true)

      // In place under the router's name for it, verified, nothing partial left.
      expect(readdirSync(modelsDir).sort()).toEqual(['alpha.gguf', 'charlie.gguf'])
      expect(sha256(readFileSync(join(modelsDir, 'charlie.gguf')))).toBe(sha256(charlie))
      // The hub saw the cut and a resume for the rest: a Range request from where it stopped.
      const gets = hub.requests.filter((r) => r.method === 'GET')
      expect(gets).toHaveLength(2)
      expect(gets[0]).toMatchObject({ range: null, status: 200 })
      expect(gets[1]!.range).toMatch(/^bytes=[1-9]\d*-$/)
      expect(gets[1]!.status).toBe(206)

      // The server heard downloading, then verifying, then completed, from this worker.
      const reports = capturedLogLines()
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((r) => r.msg === 'model download progress' && r.worker_id === d.agent.id)
      const steps = reports.map((r) => r.status).filter((s, i, all) => s !== all[i - 1])
      expect(steps).toEqual(['downloading', 'verifying', 'completed'])
      expect(reports.at(-2)).toMatchObject({ completed_bytes: charlie.length, total_bytes: charlie.length })

      // Hashed once, as it arrived: the daemon did not read the file again for the inventory.
      const charliePath = join(modelsDir, 'charlie.gguf')
      const hashedAgain = capturedLogLines().filter(
        (l) => l.includes('"hashed model file"') && l.includes(charliePath),
      )
      expect(hashedAgain).toEqual([])
      // The worker row: C on the worker with the catalogue's digest (the inventory carries it).
      const models = await f.models(d.agent.id)
      expect(models.charlie).toMatchObject({ digest: sha256(charlie) })
      expect(['loaded', 'on_disk']).toContain(models.charlie.state)
    } finally {
      await stopDaemon(d)
    }
  })
})

// The downloads that must not loop nor destroy (docs/worker.md "Downloads"), each against its own
// control plane (a batch waiting in one would draw the next test's daemon to it).
withRealEngine('downloads that never destroy and never loop', (engine) => {
  const dir = mkdtempSync(join(tmpdir(), 'gk-download-safe-'))
  const servers: TestServer[] = []
  const hubs: StandInHub[] = []
  afterAll(async () => {
    for (const h of hubs) h.stop()
    for (const s of servers) await s.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  /** A control plane whose catalogue holds one hub entry `name` (pinned to `bytes`), a hub, a models directory. */
  async function scenario(name: string, bytes: Uint8Array, o: Parameters<typeof startStandInHub>[0] = {}) {
    const root = mkdtempSync(join(dir, `${name}-`))
    const modelsDir = join(root, 'models')
    mkdirSync(modelsDir)
    const hub = startStandInHub(o)
    hubs.push(hub)
    const repo = `gridkeep/tiny-${name}-GGUF`
    const file = `tiny-${name}-F32.gguf`
    hub.put(repo, file, bytes)
    const manifest = join(root, 'models.yaml')
    writeFileSync(
      manifest,
      [
        'models:',
        `  - id: tiny-${name}-f32`,
        '    task_type: chat',
        '    quantization: F32',
        '    vram_gb: 1',
        '    size_gb: 0.01',
        `    digest: sha256:${sha256(bytes)}`,
        '    source_type: huggingface',
        `    source_ref: ${repo}/${file}`,
        '    serving_profiles:',
        '      - runtime: llama.cpp',
        `        runtime_model_id: ${name}`,
        '        params: { threads: 1, ctx_size: 1024 }',
      ].join('\n'),
    )
    const server = await startTestServer({
      CATALOGUE_PATH: manifest,
      LOG_LEVEL: 'info',
      HEARTBEAT_TIMEOUT_SECONDS: '4',
    })
    servers.push(server)
    const f = await managedFleet(server)
    let beats = 0
    const d = runManaged(
      managedOptions(server.url, f.key, engine, modelsDir, { max_download_gb: 1, hub_url: hub.url }),
      (e) => {
        if (e.type === 'heartbeat' && e.ok) beats++
      },
    )
    const gets = () => hub.requests.filter((r) => r.method === 'GET').length
    return { server, hub, f, d, modelsDir, path: join(modelsDir, `${name}.gguf`), gets, beats: () => beats }
  }

  test('a hub file with the wrong sha256 is fetched once, then backed off; the batch says why', async () => {
    const bytes = tinyModel(31)
    const s = await scenario('delta', bytes)
    s.hub.misbehave('gridkeep/tiny-delta-GGUF', 'tiny-delta-F32.gguf', { wrongBytes: true })
    try {
      const id = await s.f.submit('tiny-delta-f32', 2)
      const waiting = await until('the batch waiting on the failed download', async () => {
        const w = (await s.f.batch(id)).waiting
        return w?.reason === 'download_failed' ? w : null
      })
      expect(waiting.details).toMatchObject({
        catalogue_id: 'tiny-delta-f32',
        worker_name: 'test-worker',
        failures: 1,
        error: expect.stringMatching(/^sha256 of tiny-delta-F32\.gguf is [0-9a-f]{64}, the catalogue's is /),
      })
      expect(waiting.message).toContain('Worker test-worker could not download tiny-delta-f32: sha256 of')
      // What asked it again at once before: the next heartbeats and polls. Let several pass.
      const beats = s.beats()
      // (The daemon polls every 50 ms, so two heartbeats span some forty polls.)
      await until('two heartbeats after the failure', () => s.beats() >= beats + 2)
      expect(s.gets()).toBe(1)
      expect((await s.f.batch(id)).status).toBe('validated')
      // The worker row says so too; nothing of the bad bytes is left.
      const models = await s.f.models(s.d.agent.id)
      expect(models.delta).toMatchObject({ state: 'download_failed', failure: { failures: 1 } })
      expect(readdirSync(s.modelsDir)).toEqual([])
    } finally {
      await stopDaemon(s.d)
    }
  })

  test('a destination already there with other bytes is hashed, reported and left as it was', async () => {
    const bytes = tinyModel(32)
    const s = await scenario('echo', bytes)
    // Someone's other model under the name the catalogue's would take.
    const theirs = tinyModel(33)
    writeFileSync(s.path, theirs)
    const ino = statSync(s.path).ino
    try {
      const id = await s.f.submit('tiny-echo-f32', 2)
      const waiting = await until('the batch waiting on the failed download', async () => {
        const w = (await s.f.batch(id)).waiting
        return w?.reason === 'download_failed' ? w : null
      })
      expect(waiting.details.error).toBe(
        `${s.path} is already there and is not the catalogue's: its sha256 is ${sha256(theirs)}, the catalogue's ${sha256(bytes)}; it is left as it is`,
      )
      expect(s.gets()).toBe(0)
      expect(statSync(s.path).ino).toBe(ino)
      expect(sha256(readFileSync(s.path))).toBe(sha256(theirs))
      expect(readdirSync(s.modelsDir)).toEqual(['echo.gguf'])
    } finally {
      await stopDaemon(s.d)
    }
  })

  test('a model copied in while the daemon fetches it is kept (hashed, never replaced) and serves the batch', async () => {
    const bytes = tinyModel(34)
    let ino: number | null = null
    let target = ''
    const s = await scenario('foxtrot', bytes, {
      // The copy lands as the daemon starts fetching.
      onRequest: (r) => {
        if (r.method !== 'GET' || ino !== null) return
        writeFileSync(target, bytes)
        ino = statSync(target).ino
      },
    })
    target = s.path
    try {
      const id = await s.f.submit('tiny-foxtrot-f32', 2)
      const batch = await s.f.completed(id)
      expect(batch.request_counts).toEqual({ total: 2, completed: 2, failed: 0 })
      expect(s.gets()).toBe(1)
      expect(statSync(s.path).ino).toBe(ino!)
      expect(readdirSync(s.modelsDir)).toEqual(['foxtrot.gguf'])
    } finally {
      await stopDaemon(s.d)
    }
  })
})
