import { afterAll, beforeAll, expect, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { engineEnv } from '../../src/daemon/engines/env'
import { childName, LaunchedEngine } from '../../src/daemon/engines/launched'
import { LoadFailed } from '../../src/daemon/engines/types'
import { StateDir } from '../../src/daemon/state'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

// The launched engine alone (src/daemon/engines/launched.ts), against the stand-in of
// test/helpers/fake-vllm.ts: what it checks before it says a model is loaded, and what it does with
// the records a killed daemon left — never kill a process that is not its own, never keep one that
// runs another command.

const FAKE = resolve(import.meta.dir, '../helpers/fake-vllm.ts')
const LAUNCH = `${process.execPath} ${FAKE} serve {model_path} --served-model-name {model} --host 127.0.0.1 --port {port} {params}`
const dir = mkdtempSync(join(tmpdir(), 'gk-launched-engine-'))
const modelsDir = join(dir, 'models')

beforeAll(() => {
  mkdirSync(join(modelsDir, 'alpha'), { recursive: true })
  writeFileSync(join(modelsDir, 'alpha', 'model.safetensors'), 'weights')
  writeFileSync(join(modelsDir, 'alpha', 'config.json'), '{}')
  delete process.env.FAKE_VLLM_CONTROL
  process.env.FAKE_VLLM_LOAD_MS = '20'
})

afterAll(() => {
  for (const pid of running()) process.kill(pid, 'SIGKILL')
  delete process.env.FAKE_VLLM_LOAD_MS
  rmSync(dir, { recursive: true, force: true })
})

const engine = (
  state: StateDir,
  o: { command?: string; extraArgs?: string[]; loadTimeoutMs?: number } = {},
) =>
  new LaunchedEngine({
    engine: 'vllm',
    state,
    modelsDir,
    command: o.command ?? LAUNCH,
    extraArgs: o.extraArgs,
    ...(o.loadTimeoutMs ? { loadTimeoutMs: o.loadTimeoutMs } : {}),
    // The stand-in's control knobs (engines get an allow-list of the daemon's environment).
    env: engineEnv(process.env, { pass: ['FAKE_VLLM_*'] }),
  })

/** Whether the process runs (a zombie does not). */
const alive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return false
  }
}

/** The stand-in engines running on this file's models. */
function running(): number[] {
  const out: number[] = []
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      if (argv.includes(FAKE) && argv.some((a) => a.startsWith(modelsDir)) && alive(Number(pid)))
        out.push(Number(pid))
    } catch {}
  }
  return out
}

const NO_GPUS = { gpus: null }

const record = (state: StateDir) =>
  state.readJson<{ pid: number; port: number }>(join('engines', `${childName('alpha')}.json`))

test('record names are file names, distinct for model names that read alike', () => {
  expect(childName('meta-llama/Llama-3.1')).toMatch(/^model-meta-llama_Llama-3\.1-[0-9a-f]{8}$/)
  expect(childName('a/b')).not.toBe(childName('a_b'))
})

test('a command that names the model another way: the load fails saying what the engine serves, and its process is stopped', async () => {
  const e = engine(new StateDir(mkdtempSync(join(dir, 'state-'))), {
    command: LAUNCH.replace('--served-model-name {model}', '--served-model-name served-{model}'),
  })
  await e.start()
  const err = await e.load('alpha', {}, NO_GPUS).catch((x) => x)
  expect(err).toBeInstanceOf(LoadFailed)
  expect(err.message).toBe(
    'the engine serves served-alpha, not alpha: does the launch command pass {model} as its served model name?',
  )
  expect(running()).toEqual([])
  expect((await e.status()).models).toEqual([
    {
      name: 'alpha',
      state: 'failed',
      files: [join(modelsDir, 'alpha', 'model.safetensors'), join(modelsDir, 'alpha', 'config.json')],
      error: err.message,
    },
  ])
})

test('what a killed daemon left running with another command is stopped at the next start, not adopted', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  const first = engine(state)
  await first.start()
  await first.load('alpha', { max_model_len: 1024 }, NO_GPUS)
  const left = record(state)!
  expect(alive(left.pid)).toBe(true)
  // The daemon is gone without stopping it (as after SIGKILL); the next runs with more arguments.
  const next = engine(state, { extraArgs: ['--seed', '1'] })
  await next.start()
  expect(alive(left.pid)).toBe(false)
  expect((await next.status()).models.map((m) => [m.name, m.state])).toEqual([['alpha', 'unloaded']])
  expect(existsSync(join(state.dir, 'engines', `${childName('alpha')}.json`))).toBe(false)
  expect(existsSync(join(state.dir, 'engines', `${childName('alpha')}.launch.json`))).toBe(false)
})

test('a record whose pid now belongs to another process: that process is left alone, the record dropped', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  const first = engine(state)
  await first.start()
  await first.load('alpha', {}, NO_GPUS)
  const left = record(state)!
  await first.stop()
  // The record of a run whose pid was taken since by an unrelated program.
  const stranger = Bun.spawn(['sleep', '30'], { stdin: 'ignore' })
  state.writeJson(join('engines', `${childName('alpha')}.json`), {
    ...left,
    pid: stranger.pid,
    started_at_ms: Date.now() - 3_600_000,
  })
  state.writeJson(join('engines', `${childName('alpha')}.launch.json`), { model: 'alpha', params: {} })
  const next = engine(state)
  await next.start()
  expect(alive(stranger.pid)).toBe(true)
  expect(existsSync(join(state.dir, 'engines', `${childName('alpha')}.json`))).toBe(false)
  stranger.kill()
  await stranger.exited
})

test('a process that ends unasked is reported with its last lines, the model unloaded, and not started again until asked', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  const e = engine(state)
  const ended: [string, string[] | null][] = []
  e.onExit((reason, models) => ended.push([reason, models]))
  await e.start()
  await e.load('alpha', {}, NO_GPUS)
  const { pid } = record(state)!
  const logFrom = capturedLogLines().length
  process.kill(pid, 'SIGKILL')
  await until('the end reported', () => ended.length === 1)
  expect(ended[0]![1]).toEqual(['alpha'])
  expect(ended[0]![0]).toStartWith('alpha: the engine was killed (SIGKILL); its last lines: ')
  expect(ended[0]![0]).toContain('Uvicorn running on http://127.0.0.1:')
  expect((await e.status()).models[0]).toMatchObject({ name: 'alpha', state: 'failed' })
  expect(record(state)).toBeUndefined()
  // The next load starts it again, after the backoff (1 s: as long as a supervised child's own
  // restart would wait). Had anything restarted it meanwhile, the load would have found that
  // process (adopting or stopping it, and saying so) or run beside it.
  expect(running()).toEqual([])
  await e.load('alpha', {}, NO_GPUS)
  expect(running()).toEqual([record(state)!.pid])
  const said = capturedLogLines().slice(logFrom)
  expect(said.filter((l) => /engine started/.test(l))).toHaveLength(1)
  expect(said.filter((l) => /a previous run left/.test(l))).toEqual([])
  await e.stop()
  expect(running()).toEqual([])
})

test('an adopted engine that dies: the next look at the engine waits to hear its end and never says it is loaded', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  const first = engine(state)
  await first.start()
  await first.load('alpha', {}, NO_GPUS)
  // A second daemon on the same state directory, as after a SIGKILL: it adopts the process.
  const next = engine(state)
  const ended: string[] = []
  next.onExit((reason) => ended.push(reason))
  await next.start()
  expect((await next.status()).models[0]).toMatchObject({ name: 'alpha', state: 'loaded' })
  const { pid } = record(state)!
  process.kill(pid, 'SIGKILL')
  await until('the process gone', () => !alive(pid))
  // An adopted process is not this daemon's child: its end is only seen by looking (every second).
  const after = (await next.status()).models[0]!
  expect(after.state).toBe('failed')
  expect(after.error).toStartWith('alpha: the engine ended; its last lines: ')
  expect(ended).toEqual([after.error!])
  await first.stop()
})

test('a launch command beginning with env: its variables and the GPU set go on top of the allow-list, the engine itself recorded', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  // A variable of the daemon's that no allow-list names (engines/env.ts), set while the engine starts:
  // never the engine's.
  process.env.GK_TEST_UNLISTED = 'daemon-only'
  const e = engine(state, { command: `env FAKE_VLLM_LOAD_MS=5 EXTRA=a=b ${LAUNCH}` })
  const logFrom = capturedLogLines().length
  try {
    await e.start()
    await e.load('alpha', {}, { gpus: [1, 3] })
  } finally {
    delete process.env.GK_TEST_UNLISTED
  }
  const rec = state.readJson<{ pid: number; argv: string[]; env: Record<string, string> }>(
    join('engines', `${childName('alpha')}.json`),
  )!
  // What runs is the engine, not `env`: its command line is the recorded one.
  expect(rec.argv[0]).toBe(process.execPath)
  expect(readFileSync(`/proc/${rec.pid}/cmdline`, 'utf8').split('\0').slice(0, -1)).toEqual(rec.argv)
  expect(rec.env).toEqual({
    FAKE_VLLM_LOAD_MS: '5',
    EXTRA: 'a=b',
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
    CUDA_VISIBLE_DEVICES: '1,3',
  })
  const environ = readFileSync(`/proc/${rec.pid}/environ`, 'utf8').split('\0')
  expect(environ).toContain('EXTRA=a=b')
  expect(environ).toContain('CUDA_VISIBLE_DEVICES=1,3')
  expect(environ).toContain(`PATH=${process.env.PATH}`)
  expect(environ.filter((v) => v.startsWith('GK_TEST_UNLISTED='))).toEqual([])
  // The log names the variables, never their values (one may be a credential).
  const started = capturedLogLines()
    .slice(logFrom)
    .map((l) => JSON.parse(l))
    .find((r) => r.msg === 'engine started')
  expect(started.env).toEqual(['FAKE_VLLM_LOAD_MS', 'EXTRA', 'CUDA_DEVICE_ORDER', 'CUDA_VISIBLE_DEVICES'])
  await e.stop()
})

test('what a killed daemon left on a GPU set is adopted with that set; one recorded with other variables is stopped', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  const first = engine(state)
  await first.start()
  await first.load('alpha', {}, { gpus: [1] })
  const left = record(state)!
  // A daemon started again on the same state directory (as after SIGKILL) adopts it: same command, same GPUs.
  const next = engine(state)
  await next.start()
  expect((await next.status()).models[0]).toMatchObject({ name: 'alpha', state: 'loaded' })
  expect(alive(left.pid)).toBe(true)
  // The same process recorded with another GPU set (a record from before --gpus changed): stopped.
  const path = join(state.dir, 'engines', `${childName('alpha')}.json`)
  const rec = JSON.parse(readFileSync(path, 'utf8'))
  writeFileSync(path, JSON.stringify({ ...rec, env: { ...rec.env, CUDA_VISIBLE_DEVICES: '0' } }))
  const third = engine(state)
  await third.start()
  expect(alive(left.pid)).toBe(false)
  expect((await third.status()).models[0]).toMatchObject({ name: 'alpha', state: 'unloaded' })
})

test('a load given up on an engine that wrote nothing says how it was started (credentials redacted), never an empty reason', async () => {
  const state = new StateDir(mkdtempSync(join(dir, 'state-')))
  const secret = 'sk-not-for-logs-0123456789'
  // Silent, and never answering: only the load timeout ends it.
  const e = engine(state, {
    command: `${process.execPath} -e "await Bun.sleep(3600000)" {model_path} --api-key ${secret} --port {port}`,
    loadTimeoutMs: 300,
  })
  const logFrom = capturedLogLines().length
  await e.start()
  const failed = await e.load('alpha', {}, NO_GPUS).catch((x) => x)
  expect(failed).toBeInstanceOf(LoadFailed)
  expect(failed.message).toMatch(
    /^gave up loading alpha after \d+ s \(no output for \d+ s, --load-timeout 0.3\); the engine wrote nothing; its command: \S+ -e await Bun.sleep\(3600000\) \S+alpha --api-key … --port \d+$/,
  )
  expect(record(state)).toBeUndefined()
  for (const line of [failed.message, ...capturedLogLines().slice(logFrom)])
    expect(line).not.toContain(secret)
  await e.stop()
})
