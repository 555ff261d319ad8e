import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
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
