import { describe, expect, test } from 'bun:test'
import { DEFAULT_LAUNCH_COMMANDS } from '../../src/daemon/engines/launch-command'
import { helpText, OptionsError, parseDaemonOptions } from '../../src/daemon/options'

// The options of a daemon that launches one engine process per model (docs/worker.md "vLLM and
// other launched engines"): --runtime vllm|sglang|command, --models-dir, --launch-command.

const KEY = 'gk-' + 'A'.repeat(40)
// The key from the environment: a daemon that starts engines refuses it in argv (docs/worker.md).
const base = ['--server', 'http://cp:8080']
const keyEnv = { GRIDKEEP_WORKER_KEY: KEY }

async function parse(argv: string[], env: Record<string, string> = {}) {
  const r = await parseDaemonOptions([...base, ...argv], { ...keyEnv, ...env })
  if (r.help) throw new Error('unexpected help')
  return r.options
}

const refused = async (argv: string[]) => {
  const e = await parseDaemonOptions([...base, ...argv], keyEnv).catch((x) => x)
  expect(e).toBeInstanceOf(OptionsError)
  return (e as Error).message
}

describe('launched-engine options', () => {
  test('vllm and sglang take their default launch command, report their own engine name and have no runtime URL', async () => {
    const vllm = await parse(['--runtime', 'vllm', '--models-dir', '/models'])
    expect(vllm).toMatchObject({
      runtime: 'vllm',
      engine: 'vllm',
      models_dir: '/models',
      launch_command: DEFAULT_LAUNCH_COMMANDS.vllm,
      runtime_url: '',
      engine_args: [],
    })
    const sglang = await parse(['--runtime', 'sglang'], {
      GRIDKEEP_MODELS_DIR: '/models',
      GRIDKEEP_ENGINE_ARGS: '--mem-fraction-static 0.8',
    })
    expect(sglang).toMatchObject({
      engine: 'sglang',
      launch_command: DEFAULT_LAUNCH_COMMANDS.sglang,
      engine_args: ['--mem-fraction-static', '0.8'],
    })
    const own = await parse([
      '--runtime',
      'vllm',
      '--models-dir',
      '/models',
      '--launch-command',
      '/opt/vllm/bin/vllm serve {model_path} --served-model-name {model} --port {port} {params}',
    ])
    expect(own.launch_command).toStartWith('/opt/vllm/bin/vllm serve')
  })

  test('--runtime command runs any OpenAI-compatible server under the engine name given (openai by default)', async () => {
    const cmd = 'text-generation-launcher --model-id {model_path} --hostname 127.0.0.1 --port {port}'
    const tgi = await parse([
      '--runtime',
      'command',
      '--engine',
      'tgi',
      '--models-dir',
      '/m',
      '--launch-command',
      cmd,
    ])
    expect(tgi).toMatchObject({ runtime: 'command', engine: 'tgi', launch_command: cmd })
    expect(
      (await parse(['--runtime', 'command', '--models-dir', '/m'], { GRIDKEEP_LAUNCH_COMMAND: cmd })).engine,
    ).toBe('openai')
  })

  test('what cannot work is refused at start with one line saying why', async () => {
    expect(await refused(['--runtime', 'vllm'])).toContain('--runtime vllm needs --models-dir DIR')
    expect(
      await refused(['--runtime', 'vllm', '--models-dir', '/m', '--runtime-url', 'http://127.0.0.1:8000']),
    ).toContain('--runtime openai --engine vllm')
    expect(await refused(['--runtime', 'command', '--models-dir', '/m'])).toContain(
      '--runtime command needs --launch-command',
    )
    expect(
      await refused([
        '--runtime',
        'vllm',
        '--models-dir',
        '/m',
        '--launch-command',
        'vllm serve {model_path}',
      ]),
    ).toBe('--launch-command: the launch command must pass {port}: the daemon chooses the port of each model')
    expect(await refused(['--runtime', 'sglang', '--models-dir', '/m', '--engine', 'vllm'])).toContain(
      'the engine is sglang',
    )
    expect(await refused(['--runtime', 'openai', '--launch-command', 'x --port {port} {model}'])).toContain(
      '--launch-command is for --runtime vllm, sglang or command',
    )
  })

  test('--help shows the launched forms and the launch command option', () => {
    const text = helpText()
    expect(text).toContain('--runtime vllm|sglang --models-dir DIR [--launch-command CMD]')
    expect(text).toContain('--runtime command --engine NAME --models-dir DIR --launch-command CMD')
    expect(text).toContain('--launch-command "CMD"')
    expect(text).toContain('GRIDKEEP_LAUNCH_COMMAND')
    expect(text).toContain(DEFAULT_LAUNCH_COMMANDS.vllm)
    expect(text).toContain(DEFAULT_LAUNCH_COMMANDS.sglang)
  })
})
