import { afterAll, describe, expect, test } from 'bun:test'
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  DEFAULT_LAUNCH_COMMANDS,
  launchCommandProblem,
  renderLaunch,
  splitCommand,
  splitEnv,
  withInterpreter,
} from '../../src/daemon/engines/launch-command'
import { modelFiles, scanModels } from '../../src/daemon/engines/models-dir'

// The launch command of a per-model engine and its models directory (docs/worker.md "vLLM and
// other launched engines"): words split as a shell would but never run by one, the placeholders
// filled per model, and which directories are models.

const root = mkdtempSync(join(tmpdir(), 'gk-launch-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('the launch command', () => {
  test('words split on spaces; quotes and backslashes keep spaces inside one word', () => {
    expect(splitCommand(`  a  'b c'  "d \\"e\\" f" g\\ h i'j k'  `)).toEqual([
      'a',
      'b c',
      'd "e" f',
      'g h',
      'ij k',
    ])
    expect(() => splitCommand(`a 'b`)).toThrow('unclosed quote')
  })

  test('a leading env NAME=VALUE: variables for the spawn, the command after them', () => {
    expect(splitEnv(splitCommand('env A=1 B="x y" vllm serve {model_path} --port {port}'))).toEqual({
      env: { A: '1', B: 'x y' },
      words: ['vllm', 'serve', '{model_path}', '--port', '{port}'],
    })
    expect(splitEnv(['/usr/bin/env', 'A=1', 'vllm'])).toEqual({ env: { A: '1' }, words: ['vllm'] })
    expect(splitEnv(['vllm', 'A=1'])).toEqual({ env: {}, words: ['vllm', 'A=1'] })
    expect(
      launchCommandProblem('env CUDA_VISIBLE_DEVICES=1 vllm serve {model_path} --port {port}'),
    ).toBeNull()
    expect(launchCommandProblem('env A=1')).toBe(
      'the launch command sets variables with env but runs nothing',
    )
    expect(launchCommandProblem('env -i vllm serve {model_path} --port {port}')).toBe(
      "the launch command's env takes NAME=VALUE words only (got -i); put the variables first",
    )
    expect(launchCommandProblem('env P={port} vllm serve {model_path} --port {port}')).toBe(
      'the variables of the launch command take no placeholders',
    )
  })

  test('the defaults for vLLM and SGLang are valid and fill every placeholder', () => {
    for (const cmd of Object.values(DEFAULT_LAUNCH_COMMANDS)) expect(launchCommandProblem(cmd)).toBeNull()
    const argv = renderLaunch(
      splitCommand(DEFAULT_LAUNCH_COMMANDS.vllm),
      {
        model_path: '/models/meta-llama/Llama 3',
        model: 'meta-llama/Llama 3',
        port: 41234,
        params: {
          max_model_len: 8192,
          enforce_eager: true,
          trust_remote_code: false,
          gpu_memory_utilization: 0.85,
        },
      },
      ['--disable-log-requests'],
    )
    expect(argv).toEqual([
      'vllm',
      'serve',
      '/models/meta-llama/Llama 3',
      '--served-model-name',
      'meta-llama/Llama 3',
      '--host',
      '127.0.0.1',
      '--port',
      '41234',
      '--enable-prompt-tokens-details',
      '--max-model-len',
      '8192',
      '--enforce-eager',
      '--gpu-memory-utilization',
      '0.85',
      '--disable-log-requests',
    ])
    expect(
      renderLaunch(splitCommand(DEFAULT_LAUNCH_COMMANDS.sglang), {
        model_path: '/m/q',
        model: 'q',
        port: 1,
        params: {},
      }),
    ).toEqual([
      'python3',
      '-m',
      'sglang.launch_server',
      '--model-path',
      '/m/q',
      '--served-model-name',
      'q',
      '--host',
      '127.0.0.1',
      '--port',
      '1',
      '--enable-cache-report',
    ])
  })

  test('a placeholder inside a word is filled there', () => {
    expect(
      renderLaunch(splitCommand('tgi --model-id={model_path} --port={port}'), {
        model_path: '/m/x',
        model: 'x',
        port: 9,
        params: {},
      }),
    ).toEqual(['tgi', '--model-id=/m/x', '--port=9'])
  })

  test('a command the daemon could not run each model with is refused, saying why', () => {
    expect(launchCommandProblem('')).toBe('the launch command is empty')
    expect(launchCommandProblem(`serve '{model_path}`)).toContain('unclosed quote')
    expect(launchCommandProblem('vllm serve {model_path}')).toContain('must pass {port}')
    expect(launchCommandProblem('vllm serve --port {port}')).toContain('{model_path} or {model}')
    expect(launchCommandProblem('vllm serve {model_path} --port {port} {gpu}')).toContain('names {gpu}')
    expect(launchCommandProblem('vllm serve {model_path} --port {port} --x={params}')).toContain(
      'a word of its own',
    )
    expect(launchCommandProblem('{model_path}/bin/serve --port {port}')).toContain('begin with its program')
  })
})

describe('the models directory', () => {
  test('a directory holding weights is a model named by its path; one without is a namespace; hidden ones are skipped', () => {
    const put = (path: string, text = 'x') => {
      mkdirSync(join(root, 'models', path, '..'), { recursive: true })
      writeFileSync(join(root, 'models', path), text)
    }
    put('meta-llama/Llama-3.1-8B-Instruct/model-00002-of-00002.safetensors')
    put('meta-llama/Llama-3.1-8B-Instruct/model-00001-of-00002.safetensors')
    put('meta-llama/Llama-3.1-8B-Instruct/config.json', '{}')
    put('meta-llama/Llama-3.1-8B-Instruct/tokenizer.json', '{}')
    put('meta-llama/Llama-3.1-8B-Instruct/.gitattributes')
    put('meta-llama/Llama-3.1-8B-Instruct/original/consolidated.00.pth')
    put('qwen/model.safetensors')
    put('notes/readme.txt')
    put('.cache/huggingface/x/model.safetensors')
    const models = scanModels(join(root, 'models'))
    expect([...models.keys()]).toEqual(['meta-llama/Llama-3.1-8B-Instruct', 'qwen'])
    const dir = models.get('meta-llama/Llama-3.1-8B-Instruct')!
    expect(modelFiles(dir).map((f) => f.slice(dir.length + 1))).toEqual([
      'model-00001-of-00002.safetensors',
      'model-00002-of-00002.safetensors',
      'config.json',
      'tokenizer.json',
    ])
  })

  test("a script's #! interpreter comes first, so the process's command line is its argv", () => {
    const bin = join(root, 'bin')
    mkdirSync(bin, { recursive: true })
    const script = (name: string, head: string) => {
      writeFileSync(join(bin, name), `${head}\necho hi\n`)
      chmodSync(join(bin, name), 0o755)
      return join(bin, name)
    }
    expect(withInterpreter(script('direct', '#!/bin/sh'))).toEqual(['/bin/sh', join(bin, 'direct')])
    expect(withInterpreter(script('witharg', '#!/bin/sh -e'))).toEqual([
      '/bin/sh',
      '-e',
      join(bin, 'witharg'),
    ])
    expect(withInterpreter(script('viaenv', '#!/usr/bin/env sh'))).toEqual([
      Bun.which('sh')!,
      join(bin, 'viaenv'),
    ])
    expect(withInterpreter(process.execPath)).toEqual([process.execPath])
  })
})
