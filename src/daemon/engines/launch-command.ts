import { closeSync, existsSync, openSync, readSync } from 'node:fs'
import { isAbsolute, resolve } from 'node:path'
import type { Engine } from '../../domain/catalogue'
import { PLACEMENT_PARAMS, type PlacedEngine, placementParams } from '../../domain/gpu-fit'
import { paramFlags } from '../../domain/serving-params'

// The launch command of a per-model engine (docs/worker.md "vLLM and other launched engines"): one
// line with placeholders, split into words as a shell would (spaces separate, '…' and "…" quote,
// `\` escapes) but never run by a shell, so a model's name or path is always one argument.
//
//   {model_path}  the model's directory, absolute (<models-dir>/<runtime_model_id>)
//   {model}       its runtime_model_id, the name requests carry in `body.model`
//   {port}        the free loopback port the daemon chose for it
//   {params}      the serving profile's params as flags (`--max-model-len 8192 --enforce-eager`);
//                 a word of its own, which expands to as many words as there are flags
//
// A command beginning with `env NAME=VALUE …` sets those variables for the engine through the
// spawn's environment instead of running `env`: the process started, recorded and adopted is the
// engine itself (engines/child.ts).

// Each asks its engine to report the prompt tokens it served from its cache in every answer's usage
// (docs/worker.md "Cached prompt tokens"): vLLM and SGLang leave it out unless told.
export const DEFAULT_LAUNCH_COMMANDS = {
  vllm: 'vllm serve {model_path} --served-model-name {model} --host 127.0.0.1 --port {port} --enable-prompt-tokens-details {params}',
  sglang:
    'python3 -m sglang.launch_server --model-path {model_path} --served-model-name {model} --host 127.0.0.1 --port {port} --enable-cache-report {params}',
} as const

const PLACEHOLDER = /\{([a-z_]*)\}/g
const KNOWN = new Set(['model_path', 'model', 'port', 'params'])

/** The words of `text`, or throws on an unclosed quote. */
export function splitCommand(text: string): string[] {
  const words: string[] = []
  let word: string | null = null
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!
    if (/\s/.test(c)) {
      if (word !== null) words.push(word)
      word = null
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1)
      if (end < 0) throw new Error("an unclosed quote (')")
      word = (word ?? '') + text.slice(i + 1, end)
      i = end
    } else if (c === '"') {
      let quoted = ''
      let j = i + 1
      for (; j < text.length && text[j] !== '"'; j++) {
        if (text[j] === '\\' && (text[j + 1] === '"' || text[j + 1] === '\\')) j++
        quoted += text[j]
      }
      if (j >= text.length) throw new Error('an unclosed quote (")')
      word = (word ?? '') + quoted
      i = j
    } else if (c === '\\' && i + 1 < text.length) {
      word = (word ?? '') + text[++i]
    } else word = (word ?? '') + c
  }
  if (word !== null) words.push(word)
  return words
}

const ENV_WORD = /^[A-Za-z_][A-Za-z0-9_]*=/

/** The leading `env NAME=VALUE …` of a command's words, as variables, and the words after them. */
export function splitEnv(words: readonly string[]): { env: Record<string, string>; words: string[] } {
  if (words[0] !== 'env' && !words[0]?.endsWith('/env')) return { env: {}, words: [...words] }
  const env: Record<string, string> = {}
  let i = 1
  for (; i < words.length && ENV_WORD.test(words[i]!); i++) {
    const eq = words[i]!.indexOf('=')
    env[words[i]!.slice(0, eq)] = words[i]!.slice(eq + 1)
  }
  return { env, words: words.slice(i) }
}

/** What is wrong with a launch command, or null. */
export function launchCommandProblem(text: string): string | null {
  let all: string[]
  try {
    all = splitCommand(text)
  } catch (e) {
    return `the launch command has ${(e as Error).message}`
  }
  const { env, words } = splitEnv(all)
  if (all.length > 0 && words.length === 0)
    return 'the launch command sets variables with env but runs nothing'
  if (words[0]?.startsWith('-'))
    return `the launch command's env takes NAME=VALUE words only (got ${words[0]}); put the variables first`
  if (Object.values(env).some((v) => v.includes('{')))
    return 'the variables of the launch command take no placeholders'
  if (words.length === 0) return 'the launch command is empty'
  const used = new Set<string>()
  for (const w of words)
    for (const [, name] of w.matchAll(PLACEHOLDER)) {
      if (!KNOWN.has(name!))
        return `the launch command names {${name}}; its placeholders are {model_path}, {model}, {port} and {params}`
      used.add(name!)
    }
  if (!used.has('port'))
    return 'the launch command must pass {port}: the daemon chooses the port of each model'
  if (!used.has('model_path') && !used.has('model'))
    return 'the launch command must name the model with {model_path} or {model}'
  if (words.some((w) => w.includes('{params}') && w !== '{params}'))
    return '{params} must be a word of its own in the launch command (it expands to several flags)'
  if (words[0]!.includes('{')) return 'the launch command must begin with its program, not a placeholder'
  return null
}

/**
 * The flags that decide how many GPUs a vLLM or SGLang model takes or how much of each, with what to
 * do instead: the daemon places each model by its serving-profile params (docs/worker.md "GPUs"), so
 * such a flag among the launch command's words or --engine-args would start the engine on GPUs or
 * with a fraction the daemon did not plan. Each placing param is its long flag (domain/gpu-fit.ts
 * PLACEMENT_PARAMS), with the engine's other spellings of it; data parallelism is the daemon's
 * copies of a model.
 */
const PARAM = (name: string) => `set ${name} in the model's serving-profile params instead`
const COPIES =
  'the daemon runs a model in demand as copies, each on GPUs of its own (docs/worker.md "Copies")'
const ALIASES: Record<PlacedEngine, Record<string, string>> = {
  vllm: { '-tp': 'tensor_parallel_size', '-pp': 'pipeline_parallel_size' },
  sglang: { '--tp': 'tp_size', '--tensor-parallel-size': 'tp_size', '--pipeline-parallel-size': 'pp_size' },
}
const DATA_PARALLEL: Record<PlacedEngine, string[]> = {
  vllm: ['--data-parallel-size', '-dp'],
  sglang: ['--dp-size', '--dp', '--data-parallel-size'],
}
const PLACEMENT_FLAGS = Object.fromEntries(
  Object.entries(PLACEMENT_PARAMS).map(([engine, p]) => {
    const e = engine as PlacedEngine
    const params = [...p.gpus, p.fraction]
    return [
      e,
      {
        ...Object.fromEntries(params.map((k) => [`--${k.replaceAll('_', '-')}`, PARAM(k)])),
        ...Object.fromEntries(Object.entries(ALIASES[e]).map(([flag, k]) => [flag, PARAM(k)])),
        ...Object.fromEntries(DATA_PARALLEL[e].map((flag) => [flag, COPIES])),
      },
    ]
  }),
) as Record<PlacedEngine, Record<string, string>>

/**
 * Why `words` (of `where`: --launch-command, --engine-args) may not be given to `engine`, or null.
 * vLLM and SGLang read `--flag=value` and `--flag_name` as `--flag value` and `--flag-name`.
 */
export function placementFlagProblem(engine: Engine, where: string, words: readonly string[]): string | null {
  if (!placementParams(engine)) return null
  const flags = PLACEMENT_FLAGS[engine as PlacedEngine]
  for (const w of words) {
    const flag = w.split('=')[0]!.replace(/(?<=^--.*)_/g, '-')
    const instead = flags[flag]
    if (instead)
      return `${where} ${flag}: the daemon chooses each ${engine} model's GPUs and memory fraction (docs/worker.md "GPUs"); ${instead}`
  }
  return null
}

export interface LaunchValues {
  model_path: string
  model: string
  port: number
  params: Record<string, unknown>
}

/** The argv of one launch: the command's words with the placeholders filled, then `extraArgs`. */
export function renderLaunch(
  words: readonly string[],
  v: LaunchValues,
  extraArgs: readonly string[] = [],
): string[] {
  const out: string[] = []
  for (const w of words) {
    if (w === '{params}') out.push(...paramFlags(v.params))
    else
      out.push(
        w.replace(PLACEHOLDER, (_, name: string) =>
          name === 'model_path' ? v.model_path : name === 'model' ? v.model : String(v.port),
        ),
      )
  }
  return [...out, ...extraArgs]
}

/** The program's path: on PATH, or as given. */
export function findProgram(program: string): string | null {
  if (program.includes('/')) return existsSync(program) ? resolve(program) : null
  return Bun.which(program)
}

/**
 * The program as the kernel runs it: a script's `#!` interpreter (and its one argument) before the
 * script, `/usr/bin/env NAME` resolved to NAME's path. Spawned so, the process's command line is
 * its argv exactly, which is how a later run recognises it.
 */
export function withInterpreter(program: string): string[] {
  const path = findProgram(program) ?? program
  let head = ''
  try {
    const fd = openSync(path, 'r')
    try {
      const buf = Buffer.alloc(256)
      head = buf.subarray(0, readSync(fd, buf, 0, 256, 0)).toString('utf8')
    } finally {
      closeSync(fd)
    }
  } catch {
    return [path]
  }
  if (!head.startsWith('#!')) return [path]
  const line = head.slice(2).split('\n')[0]!.trim()
  const space = line.search(/\s/)
  const interpreter = space < 0 ? line : line.slice(0, space)
  const arg = space < 0 ? '' : line.slice(space).trim()
  if (!interpreter || !isAbsolute(interpreter)) return [path]
  if (interpreter.endsWith('/env') && arg && !arg.startsWith('-') && !/\s/.test(arg))
    return [Bun.which(arg) ?? arg, path]
  return arg ? [interpreter, arg, path] : [interpreter, path]
}
