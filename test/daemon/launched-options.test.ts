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
      GRIDKEEP_ENGINE_ARGS: '--chunked-prefill-size 4096',
    })
    expect(sglang).toMatchObject({
      engine: 'sglang',
      launch_command: DEFAULT_LAUNCH_COMMANDS.sglang,
      engine_args: ['--chunked-prefill-size', '4096'],
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

  test('flags that would place a vLLM or SGLang model behind the daemon’s back are refused, saying what to set instead', async () => {
    const vllm = ['--runtime', 'vllm', '--models-dir', '/m']
    const sglang = ['--runtime', 'sglang', '--models-dir', '/m']
    expect(await refused([...vllm, '--engine-args', '--max-model-len 4096 --tensor-parallel-size 2'])).toBe(
      '--engine-args --tensor-parallel-size: the daemon chooses each vllm model\'s GPUs and memory fraction (docs/worker.md "GPUs"); set tensor_parallel_size in the model\'s serving-profile params instead',
    )
    expect(await refused([...vllm, '--engine-args', '--gpu_memory_utilization=0.5'])).toContain(
      '--engine-args --gpu-memory-utilization: the daemon chooses',
    )
    expect(await refused([...vllm, '--engine-args', '-pp 2'])).toContain('set pipeline_parallel_size in')
    expect(await refused([...vllm, '--engine-args', '-dp 2'])).toContain(
      'the daemon runs a model in demand as copies, each on GPUs of its own (docs/worker.md "Copies")',
    )
    expect(
      await refused([...vllm, '--launch-command', 'vllm serve {model_path} --port {port} -tp 2 {params}']),
    ).toStartWith('--launch-command -tp: the daemon chooses each vllm model')
    expect(await refused([...sglang, '--engine-args', '--mem-fraction-static 0.5'])).toContain(
      'set mem_fraction_static in the model',
    )
    expect(await refused([...sglang, '--engine-args', '--tp 2'])).toContain('set tp_size in the model')
    expect(await refused([...sglang, '--engine-args', '--dp-size=2'])).toContain('as copies')
    // `--runtime command` with vLLM named as its engine is placed as vLLM is.
    expect(
      await refused([
        '--runtime',
        'command',
        '--engine',
        'vllm',
        '--models-dir',
        '/m',
        '--launch-command',
        '/opt/vllm serve {model_path} --port {port} --tensor-parallel-size=2',
      ]),
    ).toContain('--launch-command --tensor-parallel-size:')
    // Other flags, and flags another engine gives another meaning, are the engine's own.
    expect((await parse([...vllm, '--engine-args', '--max-model-len 4096 --tp-size 2'])).engine_args).toEqual(
      ['--max-model-len', '4096', '--tp-size', '2'],
    )
    expect(
      (
        await parse([
          '--runtime',
          'command',
          '--models-dir',
          '/m',
          '--launch-command',
          'srv --model {model_path} --port {port}',
          '--engine-args',
          '--tensor-parallel-size 2',
        ])
      ).engine_args,
    ).toEqual(['--tensor-parallel-size', '2'])
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
