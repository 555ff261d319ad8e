import { afterAll, describe, expect, test } from 'bun:test'
import { chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { alive } from '../../src/daemon/engines/child'
import { engineEnv, redactArgv } from '../../src/daemon/engines/env'
import { OptionsError, parseDaemonOptions } from '../../src/daemon/options'
import { randomBase62 } from '../../src/lib/ids'
import { chatLines } from '../helpers/daemon'
import { startFakeControlPlane } from '../helpers/fake-control-plane'
import { rememberSecret } from '../helpers/secrets'
import { until } from '../helpers/until'
import {
  ENV_ENGINE,
  type EngineDump,
  readDump,
  spawnWorker,
  standInRouter,
  UNPRIVILEGED_UID,
} from '../helpers/worker-process'

// What an engine sees of the daemon's environment (src/daemon/engines/env.ts, docs/worker.md "What
// an engine sees"): an allow-list, the names --engine-env adds, never the worker key or the hub
// token under any name. Asserted on the environment the engine process itself reports.

const dir = mkdtempSync(join(tmpdir(), 'gk-engine-env-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('the allow-list', () => {
  const key = 'gk-0123456789abcdefghij'
  const token = 'hf_abcdefghijklmnop'
  const parent = {
    PATH: '/usr/bin',
    HOME: '/home/lab',
    LANG: 'C.UTF-8',
    LC_ALL: 'C',
    CUDA_VISIBLE_DEVICES: '0,1',
    NVIDIA_DRIVER_CAPABILITIES: 'compute',
    GGML_BACKEND_PATH: '/opt/ggml.so',
    HF_HOME: '/cache/hf',
    GRIDKEEP_WORKER_KEY: key,
    GRIDKEEP_SERVER: 'http://cp',
    HF_TOKEN: token,
    HUGGING_FACE_HUB_TOKEN: token,
    NVIDIA_API_KEY: 'nvapi-1234567890',
    CUDA_SECRET: 'x',
    AWS_SECRET_ACCESS_KEY: 'aws-secret-value',
    LAB_SETTING: 'kept',
    VLLM_ATTENTION_BACKEND: 'FLASHINFER',
    COPY_OF_KEY: key,
    URL_WITH_TOKEN: `https://hub.lab/?t=${token}`,
    UNSET: undefined,
  }

  test('what an engine needs passes; the daemon’s own names, hub tokens, credentials and anything unlisted do not', () => {
    expect(engineEnv(parent, { secrets: [key, token] })).toEqual({
      PATH: '/usr/bin',
      HOME: '/home/lab',
      LANG: 'C.UTF-8',
      LC_ALL: 'C',
      CUDA_VISIBLE_DEVICES: '0,1',
      NVIDIA_DRIVER_CAPABILITIES: 'compute',
      GGML_BACKEND_PATH: '/opt/ggml.so',
      HF_HOME: '/cache/hf',
    })
  })

  test('--engine-env adds names and families; a value holding the key or the token never passes, whatever lists it', () => {
    const env = engineEnv(parent, {
      pass: [
        'LAB_SETTING',
        'VLLM_*',
        'NVIDIA_API_KEY',
        'COPY_OF_KEY',
        'URL_WITH_TOKEN',
        'HF_TOKEN',
        'GRIDKEEP_SERVER',
      ],
      secrets: [key, token],
    })
    expect(env).toMatchObject({
      LAB_SETTING: 'kept',
      VLLM_ATTENTION_BACKEND: 'FLASHINFER',
      NVIDIA_API_KEY: 'nvapi-1234567890',
    })
    for (const name of [
      'COPY_OF_KEY',
      'URL_WITH_TOKEN',
      'HF_TOKEN',
      'GRIDKEEP_SERVER',
      'AWS_SECRET_ACCESS_KEY',
    ])
      expect(env).not.toHaveProperty(name)
  })

  test('an engine’s argv as logs show it: a credential’s value redacted, whatever form it takes', () => {
    expect(
      redactArgv([
        'vllm',
        'serve',
        '/m',
        '--api-key',
        'sk-1',
        '--hf-token=hf_2',
        'API_KEY=k3',
        '--max-num-seqs',
        '8',
        'MODE=x',
        '--port',
        '8000',
      ]),
    ).toEqual([
      'vllm',
      'serve',
      '/m',
      '--api-key',
      '…',
      '--hf-token=…',
      'API_KEY=…',
      '--max-num-seqs',
      '8',
      'MODE=x',
      '--port',
      '8000',
    ])
  })

  test('--engine-env: repeatable, a comma list in GRIDKEEP_ENGINE_ENV; the daemon’s own names and the hub token are refused', async () => {
    const base = ['--server', 'http://cp', '--key', key, '--runtime', 'openai']
    const parse = async (argv: string[], env: Record<string, string> = {}) => {
      const r = await parseDaemonOptions([...base, ...argv], env)
      if (r.help) throw new Error('help')
      return r.options.engine_env
    }
    expect(await parse([])).toEqual([])
    expect(await parse(['--engine-env', 'A', '--engine-env', 'B_*,C'])).toEqual(['A', 'B_*', 'C'])
    expect(await parse([], { GRIDKEEP_ENGINE_ENV: 'VLLM_*, NCCL_SOCKET_IFNAME' })).toEqual([
      'VLLM_*',
      'NCCL_SOCKET_IFNAME',
    ])
    const refused = async (argv: string[]) => {
      const e = await parseDaemonOptions([...base, ...argv], {}).catch((x) => x)
      expect(e).toBeInstanceOf(OptionsError)
      return (e as Error).message
    }
    expect(await refused(['--engine-env', 'GRIDKEEP_WORKER_KEY'])).toBe(
      '--engine-env GRIDKEEP_WORKER_KEY: never passed to engines (GRIDKEEP_* variables are the daemon’s own)',
    )
    expect(await refused(['--engine-env', 'GRIDKEEP_*'])).toStartWith('--engine-env GRIDKEEP_*: never passed')
    expect(await refused(['--engine-env', 'HF_TOKEN'])).toBe(
      '--engine-env HF_TOKEN: never passed to engines (the hub token stays with the daemon)',
    )
    expect(await refused(['--engine-env', 'A B'])).toBe(
      '--engine-env / GRIDKEEP_ENGINE_ENV: expected variable names (NAME or PREFIX*), comma-separated (got "A B")',
    )
  })
})

describe('the environment an engine process sees', () => {
  const key = `gk-${randomBase62(40)}`
  const token = `hf_${randomBase62(34)}`
  rememberSecret(key)
  rememberSecret(token)
  /** The daemon's environment: what a lab's shell might hold. */
  const daemonEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: dir,
    LANG: 'C.UTF-8',
    CUDA_VISIBLE_DEVICES: '1',
    HF_HOME: join(dir, 'hf'),
    GRIDKEEP_WORKER_KEY: key,
    HF_TOKEN: token,
    NVIDIA_API_KEY: 'nvapi-not-for-engines',
    LAB_SETTING: 'kept',
    TOOLS_DIR: '/opt/tools',
    UNLISTED: 'dropped',
    KEY_COPY: key,
  }
  const passed = ['--engine-env', 'LAB_SETTING', '--engine-env', 'TOOLS_*,KEY_COPY']

  /** Once the daemon has exited, the engine and the worker it started in its group are gone. */
  function expectGone(dump: EngineDump | null) {
    expect(dump).not.toBeNull()
    expect([dump!.pid, dump!.worker].filter(alive)).toEqual([])
  }

  function expectScrubbed(env: Record<string, string>) {
    expect(env).toMatchObject({
      PATH: daemonEnv.PATH,
      HOME: dir,
      LANG: 'C.UTF-8',
      CUDA_VISIBLE_DEVICES: '1',
      HF_HOME: join(dir, 'hf'),
      LAB_SETTING: 'kept',
      TOOLS_DIR: '/opt/tools',
    })
    for (const name of ['GRIDKEEP_WORKER_KEY', 'HF_TOKEN', 'NVIDIA_API_KEY', 'UNLISTED', 'KEY_COPY'])
      expect(env).not.toHaveProperty(name)
    expect(Object.keys(env).filter((n) => n.startsWith('GRIDKEEP_'))).toEqual([])
    expect(Object.values(env).filter((v) => v.includes(key) || v.includes(token))).toEqual([])
  }

  test('llama.cpp’s router, started by the daemon', async () => {
    const cp = startFakeControlPlane({ key })
    const work = mkdtempSync(join(dir, 'router-'))
    mkdirSync(join(work, 'models'))
    const worker = spawnWorker(
      [
        '--server',
        cp.url,
        '--runtime',
        'llama.cpp',
        '--models-dir',
        join(work, 'models'),
        '--llama-server',
        standInRouter(work),
        '--engine-args',
        `--dump ${work}`,
        '--state-dir',
        join(work, 'state'),
        ...passed,
      ],
      daemonEnv,
      { outputDir: work },
    )
    let dump: EngineDump | null = null
    try {
      dump = await until('the router started', () => readDump(join(work, 'router.json')))
      expectScrubbed(dump.env)
    } finally {
      worker.proc.kill('SIGTERM')
      expect(await worker.exited()).toBe(0)
      await cp.stop()
    }
    expectGone(dump)
  })

  test('a launched engine, started for a job’s model', async () => {
    const cp = startFakeControlPlane({ key })
    const work = mkdtempSync(join(dir, 'launched-'))
    mkdirSync(join(work, 'models', 'alpha'), { recursive: true })
    writeFileSync(join(work, 'models', 'alpha', 'model.safetensors'), 'weights')
    writeFileSync(join(work, 'models', 'alpha', 'config.json'), '{}')
    cp.addJob({ job_id: 'batch_env', input: chatLines(2, 'alpha').join('\n'), model: 'alpha' })
    const worker = spawnWorker(
      [
        '--server',
        cp.url,
        '--runtime',
        'command',
        '--models-dir',
        join(work, 'models'),
        '--launch-command',
        `${process.execPath} ${ENV_ENGINE} --dump ${work} --served-model-name {model} --model-path {model_path} --port {port}`,
        '--state-dir',
        join(work, 'state'),
        '--poll-interval',
        '0.05',
        '--poll-wait',
        '0',
        ...passed,
      ],
      daemonEnv,
      { outputDir: work },
    )
    let dump: EngineDump | null = null
    try {
      await cp.waitFor(() => cp.uploads.length === 1, 'the job done', 20_000)
      expect(cp.uploads[0]!.completed).toBe(2)
      dump = await until('the engine started', () => readDump(join(work, 'alpha.json')))
      expectScrubbed(dump.env)
    } finally {
      worker.proc.kill('SIGTERM')
      expect(await worker.exited()).toBe(0)
      await cp.stop()
    }
    expectGone(dump)
  })

  test('the daemon is not dumpable: its engine cannot read its /proc/<pid>/environ, while a process of the same user that did nothing is read', async () => {
    const cp = startFakeControlPlane({ key })
    // Outside `dir` (root's alone): the user it runs as reaches it.
    const work = mkdtempSync(join(tmpdir(), 'gk-dumpable-'))
    mkdirSync(join(work, 'models'))
    const router = standInRouter(work)
    // Run as a user without CAP_SYS_PTRACE (the tests' root reads any process's /proc).
    for (const p of [work, join(work, 'models'), router]) chownSync(p, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    const worker = spawnWorker(
      [
        '--server',
        cp.url,
        '--runtime',
        'llama.cpp',
        '--models-dir',
        join(work, 'models'),
        '--llama-server',
        router,
        '--engine-args',
        `--dump ${work}`,
        '--state-dir',
        join(work, 'state'),
      ],
      { ...daemonEnv, HOME: work },
      { outputDir: work, unprivileged: true },
    )
    try {
      const dump = await until('the router started', () => readDump(join(work, 'router.json')))
      expect(dump.reads).toEqual({ daemon: 'EACCES', worker: 'read' })
    } finally {
      worker.proc.kill('SIGTERM')
      expect(await worker.exited()).toBe(0)
      await cp.stop()
      rmSync(work, { recursive: true, force: true })
    }
  })
})
