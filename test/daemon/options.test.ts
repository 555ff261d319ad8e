import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { helpText, OptionsError, parseDaemonOptions } from '../../src/daemon/options'

const dir = mkdtempSync(join(tmpdir(), 'gk-opts-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const KEY = 'gk-' + 'A'.repeat(40)
const base = ['--server', 'http://cp:8080', '--key', KEY, '--runtime', 'openai']

// The key from the environment unless a test gives it otherwise: a managed engine refuses it in argv.
async function parse(argv: string[], env: Record<string, string> = {}) {
  const r = await parseDaemonOptions(argv, { GRIDKEEP_WORKER_KEY: KEY, ...env })
  if (r.help) throw new Error('unexpected help')
  return r.options
}

describe('daemon options', () => {
  test('defaults fill what is not given', async () => {
    const o = await parse(base)
    expect(o).toMatchObject({
      server: 'http://cp:8080',
      runtime: 'openai',
      runtime_url: 'http://127.0.0.1:8000',
      engine: 'openai',
      concurrency: 'auto',
      max_concurrency: 256,
      shards: true,
      max_jobs: 2,
      max_download_gb: 0,
      progress_interval: 5,
      retries: 3,
      model_files: {},
    })
    expect(o.vram_gb).toBeUndefined()
    expect(o.name.length).toBeGreaterThan(0)
    expect(o.state_dir).toContain('.gridkeep')
    const ollama = await parse(['--server', 'http://cp', '--key', KEY, '--runtime', 'ollama'])
    expect(ollama.runtime_url).toBe('http://127.0.0.1:11434')
    expect(ollama.engine).toBe('ollama')
  })

  test('GPUs and loads: --gpus restricts the daemon to those indices; --load-timeout 900 s of silence by default', async () => {
    const o = await parse(base)
    expect(o.gpus).toBeUndefined()
    expect(o.load_timeout).toBe(900)
    // --max-jobs not given: a managed engine on several GPUs may hold more (docs/worker.md "GPUs").
    expect(o.max_jobs_default).toBe(true)
    expect((await parse([...base, '--max-jobs', '3'])).max_jobs_default).toBeUndefined()
    const two = await parse([...base, '--gpus', ' 0, 2 ', '--load-timeout', '120'])
    expect(two.gpus).toEqual([0, 2])
    expect(two.load_timeout).toBe(120)
    expect((await parse(base, { GRIDKEEP_GPUS: '1', GRIDKEEP_LOAD_TIMEOUT: '30' })).gpus).toEqual([1])
    for (const bad of ['0,', 'a', '-1', '0;1'])
      await expect(parse([...base, '--gpus', bad])).rejects.toThrow(
        '--gpus / GRIDKEEP_GPUS: expected a value matching',
      )
    await expect(parse([...base, '--load-timeout', '0'])).rejects.toThrow(
      '--load-timeout / GRIDKEEP_LOAD_TIMEOUT: expected a number from 1 to 604800',
    )
  })

  test('llama.cpp: --models-dir runs the router (no URL yet), --runtime-url attaches; one of the two, and only for llama.cpp', async () => {
    const llama = ['--server', 'http://cp', '--runtime', 'llama.cpp']
    const managed = await parse([
      ...llama,
      '--models-dir',
      '/models',
      '--engine-args',
      '--threads-http 8  --verbose',
    ])
    expect(managed).toMatchObject({
      runtime: 'llama.cpp',
      engine: 'llama.cpp',
      models_dir: '/models',
      runtime_url: '',
      llama_server: 'llama-server',
      engine_args: ['--threads-http', '8', '--verbose'],
    })
    const env = await parse(llama, {
      GRIDKEEP_MODELS_DIR: '/srv/models',
      GRIDKEEP_LLAMA_SERVER: '/opt/llama/llama-server',
    })
    expect(env).toMatchObject({
      models_dir: '/srv/models',
      llama_server: '/opt/llama/llama-server',
      engine_args: [],
    })
    const attached = await parse([...llama, '--runtime-url', 'http://127.0.0.1:8080/v1'])
    expect(attached).toMatchObject({ runtime_url: 'http://127.0.0.1:8080', engine: 'llama.cpp' })
    expect(attached.models_dir).toBeUndefined()
    await expect(parse(llama)).rejects.toThrow(
      '--runtime llama.cpp needs --models-dir DIR (the daemon runs llama-server on it) or --runtime-url URL',
    )
    await expect(parse([...llama, '--models-dir', '/m', '--runtime-url', 'http://x'])).rejects.toThrow(
      '--runtime llama.cpp takes --models-dir or --runtime-url, not both',
    )
    await expect(parse([...base, '--models-dir', '/m'])).rejects.toThrow(
      '--models-dir is for --runtime llama.cpp, vllm, sglang or command (got --runtime openai)',
    )
    await expect(parse([...base, '--engine-args', '-v'])).rejects.toThrow(
      '--engine-args is for --runtime llama.cpp, vllm, sglang or command',
    )
  })

  test('concurrency: auto by default, a number pins it; shards on by default with room for two jobs', async () => {
    expect((await parse([...base, '--concurrency', '16'])).concurrency).toBe(16)
    expect((await parse(base, { GRIDKEEP_CONCURRENCY: '24' })).concurrency).toBe(24)
    expect((await parse(base, { GRIDKEEP_CONCURRENCY: 'auto' })).concurrency).toBe('auto')
    expect((await parse([...base, '--max-concurrency', '64'])).max_concurrency).toBe(64)
    // docs/api.md §16: a shard-capable worker holds the current shard and the next.
    expect((await parse([...base, '--max-jobs', '1'])).max_jobs).toBe(2)
    expect((await parse([...base, '--max-jobs', '4'])).max_jobs).toBe(4)
    const legacy = await parse([...base, '--shards', 'false'])
    expect(legacy).toMatchObject({ shards: false, max_jobs: 1 })
    expect((await parse(base, { GRIDKEEP_SHARDS: 'false', GRIDKEEP_MAX_JOBS: '3' })).max_jobs).toBe(3)
    await expect(parse([...base, '--concurrency', '0'])).rejects.toThrow(
      '--concurrency / GRIDKEEP_CONCURRENCY: expected auto or an integer from 1 to 4096',
    )
    await expect(parse([...base, '--shards', 'maybe'])).rejects.toThrow('--shards / GRIDKEEP_SHARDS')
  })

  test('capabilities: the engine’s defaults (docs/api.md §7), or exactly the ones listed', async () => {
    expect((await parse(base)).capabilities).toEqual(['json_mode', 'vision', 'embeddings', 'logprobs'])
    expect((await parse([...base, '--engine', 'tgi'])).capabilities).toEqual([
      'json_mode',
      'vision',
      'logprobs',
    ])
    expect((await parse([...base, '--capabilities', 'logprobs, json_mode'])).capabilities).toEqual([
      'json_mode',
      'logprobs',
    ])
    expect((await parse(base, { GRIDKEEP_CAPABILITIES: 'none' })).capabilities).toEqual([])
    await expect(parse([...base, '--capabilities', 'json_mode,tools'])).rejects.toThrow(
      '--capabilities / GRIDKEEP_CAPABILITIES: expected a list of json_mode, vision, embeddings, logprobs, or none (got "json_mode,tools")',
    )
  })

  test('flags beat env, env beats the config file, the file beats defaults', async () => {
    const file = join(dir, 'worker.yaml')
    writeFileSync(
      file,
      [
        'server: http://from-file:1',
        `key: ${KEY}`,
        'runtime: ollama',
        'concurrency: 3',
        'max-jobs: 2',
        'vram_gb: 12.5',
        'name: file-name',
        'model_files:',
        '  qwen: /models/qwen.gguf',
        '  llava: [/models/llava.gguf, /models/mmproj.gguf]',
      ].join('\n'),
    )
    const env = {
      GRIDKEEP_WORKER_CONFIG: file,
      GRIDKEEP_SERVER: 'http://from-env:2',
      GRIDKEEP_CONCURRENCY: '16',
    }
    const o = await parse(['--concurrency', '32', '--name=flag-name'], env)
    expect(o.server).toBe('http://from-env:2') // env > file
    expect(o.concurrency).toBe(32) // flag > env > file
    expect(o.name).toBe('flag-name') // flag > file
    expect(o.max_jobs).toBe(2) // file (kebab-case key) > default
    expect(o.vram_gb).toBe(12.5)
    expect(o.runtime).toBe('ollama')
    expect(o.model_files).toEqual({
      qwen: ['/models/qwen.gguf'],
      llava: ['/models/llava.gguf', '/models/mmproj.gguf'],
    })
  })

  test('a JSON config file via --config', async () => {
    const file = join(dir, 'worker.json')
    writeFileSync(file, JSON.stringify({ server: 'http://json:9', key: KEY, runtime: 'openai', retries: 5 }))
    const o = await parse(['--config', file])
    expect(o.server).toBe('http://json:9')
    expect(o.retries).toBe(5)
  })

  test('--model-file is repeatable and the env form takes a list', async () => {
    const o = await parse([...base, '--model-file', 'a=/m/a.gguf', '--model-file=b=/m/b.gguf'], {
      GRIDKEEP_MODEL_FILES: 'c=/m/c.gguf',
    })
    expect(o.model_files).toEqual({ a: ['/m/a.gguf'], b: ['/m/b.gguf'] })
    const fromEnv = await parse(base, { GRIDKEEP_MODEL_FILES: 'c=/m/c.gguf, d=/m/d.gguf' })
    expect(fromEnv.model_files).toEqual({ c: ['/m/c.gguf'], d: ['/m/d.gguf'] })
  })

  test('--poll-wait: 20 s by default, 0 to 30 (wait_seconds), 0 turns held polls off', async () => {
    expect((await parse(base)).poll_wait).toBe(20)
    expect((await parse([...base, '--poll-wait', '0'])).poll_wait).toBe(0)
    expect((await parse(base, { GRIDKEEP_POLL_WAIT: '30' })).poll_wait).toBe(30)
    await expect(parse([...base, '--poll-wait', '31'])).rejects.toThrow(
      '--poll-wait / GRIDKEEP_POLL_WAIT: expected a number from 0 to 30',
    )
  })

  test('the runtime URL loses a trailing /v1 (the job endpoint carries it)', async () => {
    const o = await parse([...base, '--runtime-url', 'http://gpu:8000/v1/'])
    expect(o.runtime_url).toBe('http://gpu:8000')
  })

  test('GRIDKEEP_SERVER and GRIDKEEP_WORKER_KEY are read from the environment', async () => {
    const o = await parse(['--runtime', 'openai'], {
      GRIDKEEP_SERVER: 'http://env:1/',
      GRIDKEEP_WORKER_KEY: KEY,
    })
    expect(o.server).toBe('http://env:1')
    expect(o.key).toBe(KEY)
  })

  test('bad input is one clear error naming the option, never echoing the key', async () => {
    const cases: [string[], Record<string, string>, RegExp][] = [
      [['--runtime', 'openai', '--key', KEY], {}, /--server .*required/],
      [['--server', 'http://x', '--runtime', 'openai'], {}, /--key .*required/],
      [[...base, '--runtime', 'tgi'], {}, /--runtime .*one of openai, ollama/],
      [[...base, '--concurrency', '0'], {}, /--concurrency .*integer from 1/],
      [[...base, '--concurrency', 'many'], {}, /--concurrency/],
      [[...base, '--vram-gb', '-1'], {}, /--vram-gb/],
      [[...base, '--bogus', '1'], {}, /unknown option --bogus/],
      [[...base, '--name'], {}, /--name needs a value/],
      [[...base, '--model-file', 'noequals'], {}, /NAME=PATH/],
      [['--server', 'ftp://x', '--key', KEY, '--runtime', 'openai'], {}, /--server .*https/],
      [[...base, '--config', join(dir, 'missing.yaml')], {}, /no such file/],
    ]
    for (const [argv, env, re] of cases) {
      const err = await parseDaemonOptions(argv, env).catch((e) => e)
      expect(err).toBeInstanceOf(OptionsError)
      expect(err.message).toMatch(re)
    }
    const badKey = await parseDaemonOptions(
      ['--server', 'http://x', '--runtime', 'openai', '--key', 'sk-secret-value'],
      {},
    ).catch((e) => e)
    expect(badKey.message).toMatch(/--key/)
    expect(badKey.message).not.toContain('sk-secret-value')
  })

  test('the hub: huggingface.co by default, a mirror by flag or GRIDKEEP_HUB_URL, the token from HF_TOKEN and never echoed', async () => {
    const o = await parse(base)
    expect(o.hub_url).toBe('https://huggingface.co')
    expect(o.hub_token).toBeUndefined()
    expect((await parse([...base, '--hub-url', 'http://mirror.lab/hf/'])).hub_url).toBe(
      'http://mirror.lab/hf',
    )
    const env = await parse(base, { GRIDKEEP_HUB_URL: 'http://hub.lab', HF_TOKEN: 'hf_abc123456789' })
    expect(env).toMatchObject({ hub_url: 'http://hub.lab', hub_token: 'hf_abc123456789' })
    expect((await parse([...base, '--hub-token', 'hf_flag1234567'], { HF_TOKEN: 'hf_env' })).hub_token).toBe(
      'hf_flag1234567',
    )
    await expect(parse([...base, '--hub-url', 'ftp://hub'])).rejects.toThrow('--hub-url / GRIDKEEP_HUB_URL')
    const empty = await parseDaemonOptions(base, { HF_TOKEN: ' ' }).catch((e) => e)
    expect(empty.message).toMatch(/--hub-token \/ HF_TOKEN/)
    expect(helpText()).toContain('HF_TOKEN')
  })

  test('a config file with an unknown key or bad YAML is refused', async () => {
    const unknown = join(dir, 'unknown.yaml')
    writeFileSync(unknown, 'server: http://x\nfrobnicate: 1\n')
    expect((await parseDaemonOptions(['--config', unknown], {}).catch((e) => e)).message).toMatch(
      /unknown option frobnicate/,
    )
    const broken = join(dir, 'broken.json')
    writeFileSync(broken, '{"server": ')
    expect((await parseDaemonOptions(['--config', broken], {}).catch((e) => e)).message).toMatch(
      /not valid JSON/,
    )
  })

  test('--help wins and lists every option with its env name', async () => {
    expect(await parseDaemonOptions([...base, '--help'], {})).toEqual({ help: true })
    const text = helpText()
    for (const s of [
      '--server',
      '--key',
      '--runtime-url',
      '--concurrency',
      '--vram-gb',
      '--max-download-gb',
      '--progress-interval',
      '--state-dir',
      '--model-file',
      '--models-dir',
      '--llama-server',
      '--engine-args',
      'GRIDKEEP_MODELS_DIR',
      '--config',
      'GRIDKEEP_SERVER',
      'GRIDKEEP_WORKER_KEY',
    ])
      expect(text).toContain(s)
  })
})

describe('secrets out of argv (docs/worker.md "What an engine sees")', () => {
  const TOKEN = 'hf_' + 'T'.repeat(30)
  const llama = ['--server', 'http://cp', '--runtime', 'llama.cpp', '--models-dir', '/models']
  const secretFile = (name: string, text: string) => {
    const path = join(dir, name)
    writeFileSync(path, text)
    return path
  }

  test('a daemon that starts engines refuses --key and --hub-token as flags, pointing to the file or the variable, never echoing them', async () => {
    for (const runtime of [llama, ['--server', 'http://cp', '--runtime', 'vllm', '--models-dir', '/m']]) {
      const key = await parseDaemonOptions([...runtime, '--key', KEY], {}).catch((e) => e)
      expect(key).toBeInstanceOf(OptionsError)
      expect(key.message).toBe(
        '--key on the command line is readable by every process on this machine, the engines this daemon starts included: give it with --key-file FILE or GRIDKEEP_WORKER_KEY',
      )
      const token = await parseDaemonOptions([...runtime, '--hub-token', TOKEN], {
        GRIDKEEP_WORKER_KEY: KEY,
      }).catch((e) => e)
      expect(token.message).toContain('--hub-token on the command line')
      expect(token.message).toContain('--hub-token-file FILE or HF_TOKEN')
      for (const e of [key, token]) {
        expect(e.message).not.toContain(KEY)
        expect(e.message).not.toContain(TOKEN)
      }
    }
    // A daemon that starts no engine (an engine already running) may still take them as flags.
    expect((await parse([...base, '--hub-token', TOKEN])).key).toBe(KEY)
  })

  test('--key-file and --hub-token-file (GRIDKEEP_WORKER_KEY_FILE, HF_TOKEN_PATH) read the first line; the flag wins over the environment', async () => {
    const keyFile = secretFile('key', `${KEY}\nignored\n`)
    const tokenFile = secretFile('token', `  ${TOKEN}  \n`)
    const flags = await parseDaemonOptions([...llama, '--key-file', keyFile, '--hub-token-file', tokenFile], {
      GRIDKEEP_WORKER_KEY: 'gk-from-the-environment',
    })
    expect(flags.help ? null : flags.options).toMatchObject({ key: KEY, hub_token: TOKEN })
    const env = await parseDaemonOptions(llama, {
      GRIDKEEP_WORKER_KEY_FILE: keyFile,
      HF_TOKEN_PATH: tokenFile,
    })
    expect(env.help ? null : env.options).toMatchObject({ key: KEY, hub_token: TOKEN })
  })

  test('a secret file missing, empty, or given with its secret in one place is one clear line', async () => {
    const message = (argv: string[], env: Record<string, string> = {}) =>
      parseDaemonOptions([...llama, ...argv], env).then(
        () => '',
        (e) => (e as Error).message,
      )
    expect(await message(['--key-file', join(dir, 'none')])).toBe(
      `--key-file: cannot read ${join(dir, 'none')} (ENOENT)`,
    )
    const empty = secretFile('empty', '\n')
    expect(await message([], { GRIDKEEP_WORKER_KEY_FILE: empty })).toBe(
      `GRIDKEEP_WORKER_KEY_FILE: ${empty} is empty`,
    )
    expect(await message([], { GRIDKEEP_WORKER_KEY: KEY, GRIDKEEP_WORKER_KEY_FILE: empty })).toBe(
      'GRIDKEEP_WORKER_KEY and GRIDKEEP_WORKER_KEY_FILE: give one of them',
    )
  })

  test('a launch command (its `env NAME=VALUE` too) or engine args holding the key or the hub token are refused, never echoed', async () => {
    const env = { GRIDKEEP_WORKER_KEY: KEY, HF_TOKEN: TOKEN }
    const launched = ['--server', 'http://cp', '--runtime', 'command', '--models-dir', '/m']
    const cases: [string[], string][] = [
      [
        [...launched, '--launch-command', `env API_KEY=${KEY} serve {model_path} --port {port}`],
        '--launch-command holds the worker key',
      ],
      [
        [...launched, '--launch-command', `serve {model_path} --port {port} --token ${TOKEN}`],
        '--launch-command holds the hub token',
      ],
      [[...llama, '--engine-args', `--api-key ${KEY}`], '--engine-args holds the worker key'],
    ]
    for (const [argv, want] of cases) {
      const e = await parseDaemonOptions(argv, env).catch((x) => x)
      expect(e).toBeInstanceOf(OptionsError)
      expect(e.message).toStartWith(want)
      expect(e.message).not.toContain(KEY)
      expect(e.message).not.toContain(TOKEN)
    }
  })
})
