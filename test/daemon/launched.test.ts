import { afterAll, beforeAll, expect, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import { eq } from 'drizzle-orm'
import { startTestServer, type TestServer } from '../helpers/app'
import { ownProcess } from '../helpers/children'
import { daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { managedFleet, stopDaemon } from '../helpers/managed'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// A daemon that launches one engine process per model (docs/worker.md "vLLM and other launched
// engines"): the real control plane, the real daemon — in this process, or as `bun src/cli.ts
// worker` where it is killed — and test/helpers/fake-vllm.ts, which behaves as `vllm serve` does
// (binds its port only once "loaded", names its model, exits non-zero for a corrupt model, crashes
// when told). What is asserted is what the batches, the worker row, the engines' own command lines
// and the process table say — never how long anything took.

const REPO = resolve(import.meta.dir, '../..')
const FAKE = join(REPO, 'test/helpers/fake-vllm.ts')
// With the flag the daemon's default vLLM command passes (docs/worker.md "vLLM and other launched
// engines"): the stand-in, as vLLM, then reports the prompt tokens it served from its cache.
const LAUNCH = `${process.execPath} ${FAKE} serve {model_path} --served-model-name {model} --host 127.0.0.1 --port {port} --enable-prompt-tokens-details {params}`
const ALPHA = 'org/alpha'
const ENTRY = { alpha: 'fake-alpha-bf16', beta: 'fake-beta-bf16', broken: 'fake-broken-bf16' }

const dir = mkdtempSync(join(tmpdir(), 'gk-launched-'))
const modelsDir = join(dir, 'models')
const control = join(dir, 'control')
const sha = (b: Uint8Array | string) => new Bun.CryptoHasher('sha256').update(b).digest('hex')
const weights = (seed: number) => new Uint8Array(4096).map((_, i) => (i * 31 + seed * 7) & 0xff)
let server: TestServer

beforeAll(async () => {
  mkdirSync(control, { recursive: true })
  // The engines this process starts (and those of the daemons it spawns) read these.
  process.env.FAKE_VLLM_CONTROL = control
  process.env.FAKE_VLLM_LOAD_MS = '50'
  const put = (path: string, content: Uint8Array | string) => {
    mkdirSync(join(modelsDir, path, '..'), { recursive: true })
    writeFileSync(join(modelsDir, path), content)
  }
  put(`${ALPHA}/model.safetensors`, weights(1))
  put(`${ALPHA}/config.json`, '{"architectures": ["FakeForCausalLM"]}')
  put('beta/model-00001-of-00002.safetensors', weights(2))
  put('beta/model-00002-of-00002.safetensors', weights(3))
  put('beta/config.json', '{"architectures": ["FakeForCausalLM"]}')
  put('broken/model.safetensors', weights(4))
  put('broken/config.json', '{"architectures": [')
  const entry = (
    id: string,
    model: string,
    first: Uint8Array,
    vram: number,
    params: object,
    files?: object[],
  ) => ({
    id,
    display_name: id,
    task_type: 'chat',
    quantization: 'BF16',
    vram_gb: vram,
    digest: `sha256:${sha(first)}`,
    serving_profiles: [{ runtime: 'vllm', runtime_model_id: model, params }],
    ...(files ? { artifact_files: files } : {}),
  })
  const manifest = join(dir, 'models.yaml')
  writeFileSync(
    manifest,
    JSON.stringify({
      models: [
        entry(ENTRY.alpha, ALPHA, weights(1), 10, { max_model_len: 4096, enforce_eager: true }),
        // Both shards pinned: hosted only when each one's sha256 is in the inventory.
        entry(ENTRY.beta, 'beta', weights(2), 10, { dtype: 'float16' }, [
          { path: 'model-00001-of-00002.safetensors', sha256: sha(weights(2)), size_bytes: 4096 },
          { path: 'model-00002-of-00002.safetensors', sha256: sha(weights(3)), size_bytes: 4096 },
        ]),
        entry(ENTRY.broken, 'broken', weights(4), 1, {}),
      ],
    }),
  )
  server = await startTestServer({ CATALOGUE_PATH: manifest, LOG_LEVEL: 'info' })
})

afterAll(async () => {
  // After a failure: no stand-in engine of this file outlives it.
  for (const pid of enginesRunning()) process.kill(pid, 'SIGKILL')
  delete process.env.FAKE_VLLM_CONTROL
  delete process.env.FAKE_VLLM_LOAD_MS
  await server?.stop()
  rmSync(dir, { recursive: true, force: true })
})

/** A user with a worker key of their own org (test/helpers/managed.ts); finished(): a batch completed and its output lines. */
async function fleet(s: TestServer) {
  const f = await managedFleet(s)
  return {
    ...f,
    async finished(id: string): Promise<{ batch: any; lines: any[] }> {
      const batch = await f.completed(id)
      return { batch, lines: await f.outputLines(batch) }
    },
  }
}

const key = (model: string) => model.replaceAll('/', '_')

/** Each start of the model's engine: its pid and argv, as the stand-in recorded them. */
const starts = (model: string): { pid: number; argv: string[] }[] => {
  const path = join(control, `${key(model)}.starts.jsonl`)
  if (!existsSync(path)) return []
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
}

/** The pids of stand-in engines running on this test's models (the process table). */
function enginesRunning(): number[] {
  const out: number[] = []
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      if (argv.includes(FAKE) && argv.some((a) => a.startsWith(modelsDir)) && alive(Number(pid)))
        out.push(Number(pid))
    } catch {}
  }
  return out.sort()
}

/** Whether the process runs (a zombie, ended but not yet reaped, does not). */
const alive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return false
  }
}

const flagAfter = (argv: string[], flag: string) => argv[argv.indexOf(flag) + 1]

function daemon(serverUrl: string, workerKey: string, o: Parameters<typeof daemonOptions>[3] = {}) {
  return runAgent(
    daemonOptions(serverUrl, workerKey, '', {
      runtime: 'vllm',
      engine: 'vllm',
      models_dir: modelsDir,
      launch_command: LAUNCH,
      engine_args: [],
      // The stand-in's control knobs (engines get an allow-list of the daemon's environment).
      engine_env: ['FAKE_VLLM_*'],
      vram_gb: 16,
      concurrency: 2,
      log_level: 'info',
      ...o,
    }),
    fastDeps(),
  )
}

/** Nobody else serves these models: a batch left waiting must not be claimed by a later test. */
async function drop(id: string) {
  const { db, tables } = rowsOf(server.deps)
  await db.delete(tables.batches).where(eq(tables.batches.id, id))
}

test('A then B on one daemon: each model its own process with its profile’s params; A stopped when B needs its VRAM', async () => {
  const f = await fleet(server)
  const d = daemon(server.url, f.key)
  try {
    // Every model directory is in the inventory, each file hashed, weights first, before any load.
    const before = await until('the models hashed and listed', async () => {
      const m = await f.models(d.agent.id)
      return m[ALPHA]?.state === 'on_disk' && m.beta?.state === 'on_disk' ? m : null
    })
    expect(before[ALPHA].digest).toBe(sha(weights(1)))
    expect(before.beta.digest).toBe(sha(weights(2)))
    expect(enginesRunning()).toEqual([])

    const a = await f.finished(await f.submit(ENTRY.alpha, 6))
    expect(a.batch.request_counts).toEqual({ total: 6, completed: 6, failed: 0 })
    const [alphaRun] = starts(ALPHA)
    for (const line of a.lines) {
      expect(line.response.body.model).toBe(ALPHA)
      expect(line.response.body.choices[0].message.content).toStartWith(
        `${ALPHA} (pid ${alphaRun!.pid}) says:`,
      )
    }
    // The launch command with its placeholders filled: the model's directory, its name, a port.
    expect(alphaRun!.argv.slice(0, 2)).toEqual(['serve', join(modelsDir, ALPHA)])
    expect(flagAfter(alphaRun!.argv, '--served-model-name')).toBe(ALPHA)
    expect(flagAfter(alphaRun!.argv, '--max-model-len')).toBe('4096')
    expect(alphaRun!.argv).toContain('--enforce-eager')
    expect(alive(alphaRun!.pid)).toBe(true)
    // Each prompt is `Say <i>`: every one after the first answered shares its 4-token start with an
    // earlier one, and the batch's usage sums what the engine reported.
    const cached = a.lines.map((l) => l.response.body.usage.prompt_tokens_details.cached_tokens as number)
    expect(cached.toSorted((x, y) => x - y)).toEqual([0, 4, 4, 4, 4, 4])
    expect(a.batch.usage.input_tokens_details.cached_tokens).toBe(20)
    await until(
      'A loaded in the worker row',
      async () => (await f.models(d.agent.id))[ALPHA]?.state === 'loaded',
    )

    const b = await f.finished(await f.submit(ENTRY.beta, 6))
    expect(b.batch.request_counts).toEqual({ total: 6, completed: 6, failed: 0 })
    const [betaRun] = starts('beta')
    for (const line of b.lines)
      expect(line.response.body.choices[0].message.content).toStartWith(`beta (pid ${betaRun!.pid}) says:`)
    expect(flagAfter(betaRun!.argv, '--dtype')).toBe('float16')
    expect(betaRun!.argv).not.toContain('--max-model-len')
    // 10 + 10 GB do not fit in 16: A's process was stopped to make room, and the daemon said why.
    expect(alive(alphaRun!.pid)).toBe(false)
    expect(enginesRunning()).toEqual([betaRun!.pid])
    expect(
      capturedLogLines().some((l) =>
        l.includes(`(unloading ${ALPHA}: least recently used, no job needs it)`),
      ),
    ).toBe(true)
    const after = await until('B loaded, A on disk, in the worker row', async () => {
      const m = await f.models(d.agent.id)
      return m.beta?.state === 'loaded' && m[ALPHA]?.state === 'on_disk' ? m : null
    })
    expect(after.beta.load_seconds).toBeGreaterThan(0)
  } finally {
    await stopDaemon(d)
  }
  // The engines are the daemon's children: they stopped with it, and their records are gone.
  expect(enginesRunning()).toEqual([])
  expect(readdirSync(join(d.agent.state.dir, 'engines')).filter((n) => n.endsWith('.json'))).toEqual([])
})

test('an engine that crashes mid-batch: the batch is requeued with the engine’s last lines, and the next attempt starts it again', async () => {
  const f = await fleet(server)
  const d = daemon(server.url, f.key)
  const before = starts(ALPHA).length
  try {
    // Two requests answered, then the stand-in dies as a GPU fault kills vLLM.
    writeFileSync(join(control, `${key(ALPHA)}.crash`), '2')
    const id = await f.submit(ENTRY.alpha, 8)
    const requeued = await until('the batch requeued', async () => {
      const b = await f.batch(id)
      return b.attempts >= 1 ? b : null
    })
    expect(requeued.error).toContain(`${ALPHA}: the engine exited with code 1`)
    expect(requeued.error).toContain('RuntimeError: CUDA error: an illegal memory access was encountered')
    const { batch, lines } = await f.finished(id)
    expect(batch.attempts).toBe(1)
    expect(batch.request_counts).toEqual({ total: 8, completed: 8, failed: 0 })
    const runs = starts(ALPHA).slice(before)
    expect(runs).toHaveLength(2)
    expect(alive(runs[0]!.pid)).toBe(false)
    for (const line of lines)
      expect(line.response.body.choices[0].message.content).toStartWith(
        `${ALPHA} (pid ${runs[1]!.pid}) says:`,
      )
    expect(enginesRunning()).toEqual([runs[1]!.pid])
  } finally {
    await stopDaemon(d)
  }
  expect(enginesRunning()).toEqual([])
})

test('a corrupt model directory: the load fails with the engine’s own words, the batch is requeued, and the daemon serves on', async () => {
  const f = await fleet(server)
  const d = daemon(server.url, f.key)
  let broken = ''
  try {
    broken = await f.submit(ENTRY.broken, 2)
    const requeued = await until('the batch requeued', async () => {
      const b = await f.batch(broken)
      return b.attempts >= 1 ? b : null
    })
    // The first attempt's reason, or a later one's (the model is not loaded here again for a while).
    expect(requeued.error).toMatch(
      /^broken failed to load( on this worker \d+ s ago \(not tried again here for \d+ s\))?: /,
    )
    expect(requeued.error).toContain('exited with code 1 before answering')
    expect(requeued.error).toContain('ValueError: Invalid repository ID or local directory specified')
    const ok = await f.finished(await f.submit(ENTRY.beta, 2))
    expect(ok.batch.request_counts.completed).toBe(2)
  } finally {
    await stopDaemon(d)
    await drop(broken)
  }
})

/** `gridkeep worker` as its own process, on `stateDir`, with its output in a file. */
function spawnDaemon(workerKey: string, stateDir: string): { proc: Subprocess; output: () => string } {
  const out = join(stateDir, `..`, `daemon-${Date.now()}-${Math.random().toString(36).slice(2)}.log`)
  const proc = ownProcess(
    Bun.spawn(
      [
        process.execPath,
        join(REPO, 'src/cli.ts'),
        'worker',
        '--server',
        server.url,
        '--runtime',
        'vllm',
        '--models-dir',
        modelsDir,
        '--launch-command',
        LAUNCH,
        '--engine-env',
        'FAKE_VLLM_*',
        '--state-dir',
        stateDir,
        '--vram-gb',
        '16',
        '--concurrency',
        '2',
        '--poll-wait',
        '0',
        '--poll-interval',
        '0.05',
        '--progress-interval',
        '0.2',
      ],
      {
        cwd: REPO,
        env: { ...process.env, GRIDKEEP_WORKER_KEY: workerKey },
        stdin: 'ignore',
        stdout: Bun.file(out),
        stderr: Bun.file(out),
      },
    ),
  )
  return { proc, output: () => (existsSync(out) ? readFileSync(out, 'utf8') : '') }
}

/** Daemons a failed test left running are stopped (SIGTERM: with their engines). */
async function ended(...daemons: (ReturnType<typeof spawnDaemon> | null)[]) {
  for (const d of daemons)
    if (d && d.proc.exitCode === null && d.proc.signalCode === null) {
      d.proc.kill('SIGTERM')
      await d.proc.exited
    }
}

test('a daemon SIGKILLed while its engine loads: the next start stops that engine, loads anew and serves; nothing of the old run is left', async () => {
  const f = await fleet(server)
  const stateDir = mkdtempSync(join(dir, 'state-'))
  const hold = join(control, `${key(ALPHA)}.hold`)
  const before = starts(ALPHA).length
  writeFileSync(hold, '')
  const first = spawnDaemon(f.key, stateDir)
  let second: ReturnType<typeof spawnDaemon> | null = null
  try {
    const id = await f.submit(ENTRY.alpha, 4)
    const orphan = await until('the engine started, still loading', () => starts(ALPHA)[before])
    first.proc.kill('SIGKILL')
    await first.proc.exited
    // The engine outlives the killed daemon, recorded in its state directory.
    expect(alive(orphan.pid)).toBe(true)
    expect(readdirSync(join(stateDir, 'engines')).some((n) => /^model-org_alpha-\w+\.json$/.test(n))).toBe(
      true,
    )

    second = spawnDaemon(f.key, stateDir)
    // Not answering: not adopted, stopped.
    await until('the old engine stopped by the new daemon', () => !alive(orphan.pid))
    const fresh = await until('the requeued batch’s engine started', () => starts(ALPHA)[before + 1])
    rmSync(hold)
    const { batch, lines } = await f.finished(id)
    expect(batch.attempts).toBe(1)
    for (const line of lines)
      expect(line.response.body.choices[0].message.content).toStartWith(`${ALPHA} (pid ${fresh.pid}) says:`)
    // One engine for the model, on its port, answering there.
    expect(enginesRunning()).toEqual([fresh.pid])
    const port = flagAfter(fresh.argv, '--port')
    const listed = (await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json()) as any
    expect(listed.data.map((m: any) => m.id)).toEqual([ALPHA])
    expect(second.output()).toContain('stopping an engine a previous run left')

    second.proc.kill('SIGTERM')
    expect(await second.proc.exited).toBe(0)
    expect(enginesRunning()).toEqual([])
  } finally {
    rmSync(hold, { force: true })
    await ended(first, second)
  }
})

test('a daemon SIGKILLed with a model loaded: the next start adopts that engine, which serves the next batch', async () => {
  const f = await fleet(server)
  const stateDir = mkdtempSync(join(dir, 'state-'))
  const before = starts('beta').length
  const first = spawnDaemon(f.key, stateDir)
  let second: ReturnType<typeof spawnDaemon> | null = null
  try {
    await f.finished(await f.submit(ENTRY.beta, 3))
    const run = starts('beta')[before]!
    first.proc.kill('SIGKILL')
    await first.proc.exited
    expect(alive(run.pid)).toBe(true)

    second = spawnDaemon(f.key, stateDir)
    const { lines } = await f.finished(await f.submit(ENTRY.beta, 3))
    // The same process served it: adopted, not started again.
    for (const line of lines)
      expect(line.response.body.choices[0].message.content).toStartWith(`beta (pid ${run.pid}) says:`)
    expect(starts('beta').length).toBe(before + 1)
    expect(second.output()).toContain('adopted the engine a previous run left')
    expect(enginesRunning()).toEqual([run.pid])

    second.proc.kill('SIGTERM')
    expect(await second.proc.exited).toBe(0)
    expect(alive(run.pid)).toBe(false)
  } finally {
    await ended(first, second)
  }
})
