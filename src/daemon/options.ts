import { readFileSync } from 'node:fs'
import { homedir, hostname } from 'node:os'
import { extname, join } from 'node:path'
import { type Static, Type as T } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { CAPABILITIES, type Capability, ENGINE_CAPABILITIES } from '../domain/capabilities'
import { ENGINES, type Engine } from '../domain/catalogue'
import { readCaFile } from '../lib/tls-client'
import { neverPassed } from './engines/env'
import {
  DEFAULT_LAUNCH_COMMANDS,
  launchCommandProblem,
  placementFlagProblem,
  splitCommand,
} from './engines/launch-command'

// The daemon's options, parsed in this one place. The daemon is a separate program from the server
// (src/config.ts is the server's), so it reads its own flags, environment and optional config file.
// Precedence: flags > environment > config file > defaults.

const Num = (def: number | undefined, min: number, max: number, description: string) =>
  T.Number({ minimum: min, maximum: max, description, ...(def === undefined ? {} : { default: def }) })
const Int = (def: number, min: number, max: number, description: string) =>
  T.Integer({ minimum: min, maximum: max, description, default: def })

const CAPABILITY_NAME = `(?:${CAPABILITIES.join('|')})`
const Capabilities = T.String({
  pattern: `^\\s*(?:none|${CAPABILITY_NAME}(?:\\s*,\\s*${CAPABILITY_NAME})*)\\s*$`,
  description:
    `What the engine can do, reported at registration (docs/api.md §7): a list of ${CAPABILITIES.join(', ')}, ` +
    'or none [default: the engine’s defaults, docs/api.md §7]',
})

const ENV_NAME = '[A-Za-z_][A-Za-z0-9_]*\\*?'
const EngineEnvNames = T.String({
  pattern: `^\\s*(?:${ENV_NAME}(?:\\s*,\\s*${ENV_NAME})*)?\\s*$`,
  description:
    'A variable of the daemon’s environment that engines also get (NAME, or PREFIX* for a family; ' +
    'repeatable; env form a comma list): engines get only an allow-list, never GRIDKEEP_* nor the hub token (docs/worker.md)',
})

const ModelFiles = T.Record(
  T.String({ minLength: 1 }),
  T.Union([T.String({ minLength: 1 }), T.Array(T.String())]),
  {
    description:
      'openai runtime: model name → weights file (or list of files) whose sha256 is reported as the digest; ' +
      'flag form NAME=PATH, repeatable; env form NAME=PATH,NAME2=PATH2',
  },
)

/** Runtimes whose engine the daemon starts once per model it loads (engines/launched.ts). */
export const LAUNCHED_RUNTIMES = ['vllm', 'sglang', 'command'] as const
export type LaunchedRuntime = (typeof LAUNCHED_RUNTIMES)[number]
export const isLaunched = (runtime: string): runtime is LaunchedRuntime =>
  (LAUNCHED_RUNTIMES as readonly string[]).includes(runtime)

export const DaemonOptionsSchema = T.Object({
  server: T.String({
    pattern: '^https?://',
    description: 'Control plane base URL, e.g. http://gridkeep:8080',
  }),
  key: T.String({ pattern: '^gk-', description: 'Organization worker key (gk-…); never logged' }),
  key_file: T.Optional(
    T.String({
      minLength: 1,
      description:
        'File whose first line is the worker key (/dev/stdin: what the service manager opened for the daemon): the key out of argv and the environment',
    }),
  ),
  ca_file: T.Optional(
    T.String({
      minLength: 1,
      description:
        'PEM file of a CA that signed the server’s certificate (a lab’s private CA), trusted beside the usual ones',
    }),
  ),
  runtime: T.Union(
    [
      T.Literal('openai'),
      T.Literal('ollama'),
      T.Literal('llama.cpp'),
      T.Literal('vllm'),
      T.Literal('sglang'),
      T.Literal('command'),
    ],
    {
      description:
        'Runtime adapter: openai (any OpenAI-compatible server), ollama (native API) or llama.cpp ' +
        '(a llama-server router whose models the daemon loads and unloads: with --models-dir the daemon runs it, ' +
        'with --runtime-url it attaches to one); vllm, sglang or command (any OpenAI-compatible server, ' +
        'with --launch-command and --engine): the daemon starts one process per model it loads from --models-dir',
    },
  ),
  runtime_url: T.Optional(
    T.String({
      pattern: '^https?://',
      description:
        'Runtime base URL (default http://127.0.0.1:11434 for ollama, http://127.0.0.1:8000 for openai; ' +
        'llama.cpp: a running router to attach to)',
    }),
  ),
  models_dir: T.Optional(
    T.String({
      minLength: 1,
      description:
        'llama.cpp: the directory of GGUF models (NAME.gguf, or NAME/ with its files); the daemon runs ' +
        'llama-server on it and loads what jobs need. vllm, sglang, command: one directory per model, ' +
        'DIR/<runtime_model_id>/ (org/name nests)',
    }),
  ),
  llama_server: T.String({
    minLength: 1,
    default: 'llama-server',
    description: 'llama.cpp with --models-dir: the llama-server binary to run',
  }),
  launch_command: T.Optional(
    T.String({
      minLength: 1,
      description:
        'vllm, sglang, command: how to start one model, with {model_path}, {model}, {port} and {params} ' +
        `(the serving profile's params as flags); default for vllm: ${DEFAULT_LAUNCH_COMMANDS.vllm}; ` +
        `for sglang: ${DEFAULT_LAUNCH_COMMANDS.sglang}`,
    }),
  ),
  engine_args: T.Optional(
    T.String({
      description:
        'llama.cpp with --models-dir: more arguments for llama-server; vllm, sglang, command: appended to ' +
        'every launch; split on spaces',
    }),
  ),
  engine_env: T.Optional(EngineEnvNames),
  engine: T.Optional(
    T.Union(
      ENGINES.map((e) => T.Literal(e)),
      {
        description: `Engine name reported to the server (${ENGINES.join(', ')}; default: the runtime, openai for command)`,
      },
    ),
  ),
  name: T.Optional(
    T.String({ minLength: 1, maxLength: 200, description: 'Worker name (default: the hostname)' }),
  ),
  state_dir: T.Optional(
    T.String({ minLength: 1, description: 'Directory for worker_id, machine_id, digest cache, job files' }),
  ),
  concurrency: T.Union([T.Literal('auto'), T.Integer({ minimum: 1, maximum: 4096 })], {
    default: 'auto',
    description:
      'Requests in flight at the engine, shared by all jobs: auto (found by measuring: the engine’s ' +
      'reported slots or 8 to start, raised while throughput rises, cut on 429/503/timeouts) or a number that pins it',
  }),
  max_concurrency: Int(256, 1, 4096, 'Ceiling of --concurrency auto'),
  shards: T.Boolean({
    default: true,
    description: 'Declare shards (docs/api.md §16): take parts of split batches (false: whole batches only)',
  }),
  max_jobs: T.Optional(
    T.Integer({
      minimum: 1,
      maximum: 64,
      description:
        'Jobs held at once (max_concurrent_jobs); the next is claimed when the current one has no ' +
        'requests left to start [default 2 with shards (at least 2: the current shard and the next), 1 without]',
    }),
  ),
  vram_gb: T.Optional(
    Num(
      undefined,
      0,
      1_000_000,
      'VRAM in GB when no GPU can be probed: one budget for a managed engine (with GPUs, each GPU is placed by its own memory and this is only what is reported)',
    ),
  ),
  gpus: T.Optional(
    T.String({
      pattern: '^\\s*\\d{1,3}(\\s*,\\s*\\d{1,3})*\\s*$',
      description:
        'The GPUs this daemon uses, by nvidia-smi index (0,2): its engines run on those alone, so two daemons can share a machine [default: every GPU nvidia-smi lists]',
    }),
  ),
  load_timeout: Num(
    900,
    1,
    7 * 86400,
    'Seconds a model load may go without a line of output (or, attached, without finishing) before it is given up and its engine stopped',
  ),
  max_download_gb: Num(0, 0, 1_000_000, 'Largest model the server may ask this worker to pull (0 = never)'),
  capabilities: T.Optional(Capabilities),
  hub_url: T.String({
    pattern: '^https?://',
    default: 'https://huggingface.co',
    description:
      'Model hub the runtime downloads catalogue entries from, laid out like Hugging Face ({hub}/{owner}/{repo}/resolve/{revision}/{path}): a mirror or a proxy',
  }),
  hub_token: T.Optional(
    T.String({
      minLength: 1,
      description: 'Token sent to the hub as a bearer token (gated repositories); never logged',
    }),
  ),
  hub_token_file: T.Optional(
    T.String({ minLength: 1, description: 'File whose first line is the hub token (as --key-file)' }),
  ),
  progress_interval: Num(5, 0.05, 3600, 'Seconds between progress reports of a job'),
  poll_interval: Num(5, 0.05, 3600, 'Seconds between polls while nothing is compatible'),
  poll_wait: Num(
    20,
    0,
    30,
    'Seconds the server may hold a poll until a batch is claimable (wait_seconds; 0 = plain polls)',
  ),
  request_timeout: Num(600, 0.05, 86400, 'Seconds one inference request may take'),
  retries: Int(
    3,
    1,
    20,
    'Tries per inference request (429, 5xx, connection errors and timeouts are retried)',
  ),
  shutdown_grace: Num(60, 0, 86400, 'Seconds a SIGTERM waits for running jobs before reporting them failed'),
  model_files: T.Optional(ModelFiles),
  log_level: T.Union([T.Literal('debug'), T.Literal('info'), T.Literal('warn'), T.Literal('error')], {
    default: 'info',
    description: 'Least severe log level written',
  }),
})

type Parsed = Static<typeof DaemonOptionsSchema>
export type DaemonOptions = Omit<
  Parsed,
  | 'runtime_url'
  | 'engine'
  | 'name'
  | 'state_dir'
  | 'model_files'
  | 'max_jobs'
  | 'engine_args'
  | 'engine_env'
  | 'capabilities'
  | 'gpus'
> & {
  /** --ca-file: the CA's PEM, read at start (docs/worker.md). */
  ca?: string
  max_jobs: number
  /** --max-jobs was not given: a managed engine on several GPUs may hold one job more per GPU. */
  max_jobs_default?: boolean
  /** --gpus: nvidia-smi indices; absent: every GPU. */
  gpus?: number[]
  /** The engine's base URL; empty for a managed llama.cpp (its router's port is found at start). */
  runtime_url: string
  engine_args: string[]
  /** --engine-env: names (or PREFIX*) engines get besides the allow-list (engines/env.ts). */
  engine_env: string[]
  engine: Engine
  /** What the engine can do, as the daemon reports it at registration (docs/api.md §7). */
  capabilities: Capability[]
  name: string
  state_dir: string
  model_files: Record<string, string[]>
}

type Field = keyof typeof DaemonOptionsSchema.properties

/** Environment variable of each option (docs/worker.md's options table): GRIDKEEP_<NAME>, but GRIDKEEP_WORKER_KEY and HF_TOKEN. */
export const ENV_NAMES: Record<Field, string> = {
  server: 'GRIDKEEP_SERVER',
  key: 'GRIDKEEP_WORKER_KEY',
  key_file: 'GRIDKEEP_WORKER_KEY_FILE',
  ca_file: 'GRIDKEEP_CA_FILE',
  runtime: 'GRIDKEEP_RUNTIME',
  runtime_url: 'GRIDKEEP_RUNTIME_URL',
  models_dir: 'GRIDKEEP_MODELS_DIR',
  llama_server: 'GRIDKEEP_LLAMA_SERVER',
  launch_command: 'GRIDKEEP_LAUNCH_COMMAND',
  engine_args: 'GRIDKEEP_ENGINE_ARGS',
  engine_env: 'GRIDKEEP_ENGINE_ENV',
  engine: 'GRIDKEEP_ENGINE',
  name: 'GRIDKEEP_WORKER_NAME',
  state_dir: 'GRIDKEEP_STATE_DIR',
  concurrency: 'GRIDKEEP_CONCURRENCY',
  max_concurrency: 'GRIDKEEP_MAX_CONCURRENCY',
  shards: 'GRIDKEEP_SHARDS',
  max_jobs: 'GRIDKEEP_MAX_JOBS',
  vram_gb: 'GRIDKEEP_VRAM_GB',
  gpus: 'GRIDKEEP_GPUS',
  load_timeout: 'GRIDKEEP_LOAD_TIMEOUT',
  max_download_gb: 'GRIDKEEP_MAX_DOWNLOAD_GB',
  capabilities: 'GRIDKEEP_CAPABILITIES',
  hub_url: 'GRIDKEEP_HUB_URL',
  // The name Hugging Face's own tools read, so a machine already set up for them needs nothing more.
  hub_token: 'HF_TOKEN',
  // huggingface_hub's own name for the file holding its token.
  hub_token_file: 'HF_TOKEN_PATH',
  progress_interval: 'GRIDKEEP_PROGRESS_INTERVAL',
  poll_interval: 'GRIDKEEP_POLL_INTERVAL',
  poll_wait: 'GRIDKEEP_POLL_WAIT',
  request_timeout: 'GRIDKEEP_REQUEST_TIMEOUT',
  retries: 'GRIDKEEP_RETRIES',
  shutdown_grace: 'GRIDKEEP_SHUTDOWN_GRACE',
  model_files: 'GRIDKEEP_MODEL_FILES',
  log_level: 'GRIDKEEP_LOG_LEVEL',
}
export const CONFIG_ENV = 'GRIDKEEP_WORKER_CONFIG'

const FIELDS = Object.keys(DaemonOptionsSchema.properties) as Field[]
const flagOf = (f: Field) => `--${f.replaceAll('_', '-')}`
const FLAG_FIELDS = new Map<string, Field>(FIELDS.map((f) => [flagOf(f), f]))
// `--model-file NAME=PATH` reads better than `--model-files` for a repeatable flag.
FLAG_FIELDS.set('--model-file', 'model_files')
FLAG_FIELDS.delete('--model-files')

export class OptionsError extends Error {}

export type ParseResult = { help: true } | { help: false; options: DaemonOptions }

/**
 * Parses argv (without the program and subcommand), the environment and the config file named by
 * `--config` or GRIDKEEP_WORKER_CONFIG. Throws OptionsError with one line naming the culprit.
 */
export async function parseDaemonOptions(
  argv: string[],
  env: Record<string, string | undefined> = process.env,
): Promise<ParseResult> {
  const flags: Record<string, unknown> = {}
  let configPath: string | undefined = env[CONFIG_ENV] || undefined
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === '--help' || arg === '-h') return { help: true }
    const eq = arg.indexOf('=')
    const flag = eq > 0 && arg.startsWith('--') ? arg.slice(0, eq) : arg
    let value: string | undefined = eq > 0 && arg.startsWith('--') ? arg.slice(eq + 1) : undefined
    const field = FLAG_FIELDS.get(flag)
    if (flag !== '--config' && !field) throw new OptionsError(`unknown option ${flag} (see --help)`)
    if (value === undefined) {
      value = argv[++i]
      if (value === undefined) throw new OptionsError(`${flag} needs a value`)
    }
    if (flag === '--config') configPath = value
    else if (field === 'model_files') {
      flags.model_files = { ...(flags.model_files as object), ...parseModelFiles(value, flag) }
    } else if (field === 'engine_env' && flags.engine_env !== undefined) {
      // Repeatable: each --engine-env adds its names.
      flags.engine_env = `${flags.engine_env},${value}`
    } else flags[field!] = value
  }

  const fromEnv: Record<string, unknown> = {}
  for (const f of FIELDS) {
    const v = env[ENV_NAMES[f]]
    if (v === undefined || v === '') continue
    fromEnv[f] = f === 'model_files' ? parseModelFiles(v, ENV_NAMES[f]) : v.trim()
  }

  const fromFile = configPath ? await readConfigFile(configPath) : {}
  // Secrets given as flags themselves, before their files are read into the same fields.
  const onArgv = SECRET_FILES.map(([, field]) => field).filter((f) => flags[f] !== undefined)
  readSecretFiles(flags, flagOf)
  readSecretFiles(fromEnv, (f) => ENV_NAMES[f])
  readSecretFiles(fromFile, (f) => `${f} in ${configPath}`)
  const merged = { ...fromFile, ...fromEnv, ...flags }
  const converted = Value.Default(DaemonOptionsSchema, Value.Convert(DaemonOptionsSchema, merged)) as Record<
    string,
    unknown
  >
  const first = Value.Errors(DaemonOptionsSchema, converted).First()
  if (first) {
    const name = (first.path.replace(/^\//, '').split('/')[0] || 'options') as Field
    const where = name in ENV_NAMES ? `${flagOf(name)} / ${ENV_NAMES[name]}` : name
    const missing = converted[name] === undefined
    // Never echo a secret back.
    const got =
      missing || name === 'key' || name === 'hub_token' ? '' : ` (got ${JSON.stringify(converted[name])})`
    throw new OptionsError(`${where}: ${missing ? 'required' : describe(first.schema)}${got}`)
  }
  return { help: false, options: finish(converted as Parsed, onArgv) }
}

/** Each file option and the secret it holds. */
const SECRET_FILES = [
  ['key_file', 'key'],
  ['hub_token_file', 'hub_token'],
] as const

/** Reads one source's secret files into their fields; a secret and its file in one source is an error. */
function readSecretFiles(source: Record<string, unknown>, where: (f: Field) => string) {
  for (const [file, field] of SECRET_FILES) {
    const path = source[file]
    if (path === undefined) continue
    if (source[field] !== undefined)
      throw new OptionsError(`${where(field)} and ${where(file)}: give one of them`)
    let text: string
    try {
      text = readFileSync(String(path), 'utf8')
    } catch (e) {
      throw new OptionsError(
        `${where(file)}: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      )
    }
    const secret = text.split('\n')[0]!.trim()
    if (!secret) throw new OptionsError(`${where(file)}: ${path} is empty`)
    source[field] = secret
  }
}

/** What an option holding a secret may be given by instead of argv (docs/worker.md "What an engine sees"). */
const SAFER: Record<(typeof SECRET_FILES)[number][1], string> = {
  key: '--key-file FILE or GRIDKEEP_WORKER_KEY',
  hub_token: '--hub-token-file FILE or HF_TOKEN',
}

function finish(p: Parsed, onArgv: readonly (typeof SECRET_FILES)[number][1][] = []): DaemonOptions {
  const model_files: Record<string, string[]> = {}
  for (const [name, v] of Object.entries(p.model_files ?? {})) model_files[name] = Array.isArray(v) ? v : [v]
  const launched = isLaunched(p.runtime)
  const managed = (p.runtime === 'llama.cpp' && p.models_dir !== undefined) || launched
  // docs/worker.md "What an engine sees": argv is readable by every process of the machine
  // (/proc/<pid>/cmdline), the engines this daemon starts included.
  for (const field of onArgv)
    if (managed)
      throw new OptionsError(
        `${flagOf(field)} on the command line is readable by every process on this machine, the engines this daemon starts included: give it with ${SAFER[field]}`,
      )
  const secrets = [
    ['the worker key', p.key],
    ['the hub token', p.hub_token],
  ] as const
  for (const [what, text] of [
    ['--launch-command', p.launch_command],
    ['--engine-args', p.engine_args],
  ] as const)
    for (const [name, secret] of secrets)
      if (text && secret && text.includes(secret))
        throw new OptionsError(
          `${what} holds ${name}: an engine never gets it (docs/worker.md "What an engine sees")`,
        )
  if (p.launch_command !== undefined && !launched)
    throw new OptionsError(
      `--launch-command is for --runtime vllm, sglang or command (got --runtime ${p.runtime})`,
    )
  if (launched) {
    // docs/worker.md "vLLM and other launched engines"
    if (p.models_dir === undefined)
      throw new OptionsError(`--runtime ${p.runtime} needs --models-dir DIR (a directory per model)`)
    if (p.runtime_url !== undefined)
      throw new OptionsError(
        `--runtime ${p.runtime} starts its engines itself: no --runtime-url (for a server already running, --runtime openai --engine ${p.runtime === 'command' ? 'NAME' : p.runtime})`,
      )
    if (p.runtime === 'command' && p.launch_command === undefined)
      throw new OptionsError('--runtime command needs --launch-command CMD (how to start one model)')
    const problem = p.launch_command === undefined ? null : launchCommandProblem(p.launch_command)
    if (problem) throw new OptionsError(`--launch-command: ${problem}`)
    if (p.runtime !== 'command' && p.engine !== undefined && p.engine !== p.runtime)
      throw new OptionsError(`--engine ${p.engine} with --runtime ${p.runtime}: the engine is ${p.runtime}`)
  } else if (p.runtime === 'llama.cpp') {
    if (p.models_dir === undefined && p.runtime_url === undefined)
      throw new OptionsError(
        '--runtime llama.cpp needs --models-dir DIR (the daemon runs llama-server on it) or ' +
          '--runtime-url URL (a llama-server router already running)',
      )
    if (p.models_dir !== undefined && p.runtime_url !== undefined)
      throw new OptionsError('--runtime llama.cpp takes --models-dir or --runtime-url, not both')
  } else if (p.models_dir !== undefined || p.engine_args !== undefined) {
    throw new OptionsError(
      `${p.models_dir !== undefined ? '--models-dir' : '--engine-args'} is for --runtime llama.cpp, vllm, sglang or command (got --runtime ${p.runtime})`,
    )
  }
  const engine: Engine =
    p.runtime === 'llama.cpp'
      ? 'llama.cpp'
      : p.runtime === 'command'
        ? (p.engine ?? 'openai')
        : (p.engine ?? (p.runtime as Engine))
  if (launched) {
    // docs/worker.md "GPUs": a model's GPUs and memory fraction come from its serving profile.
    const placement =
      (p.launch_command === undefined
        ? null
        : placementFlagProblem(engine, '--launch-command', splitCommand(p.launch_command))) ??
      placementFlagProblem(engine, '--engine-args', (p.engine_args ?? '').split(/\s+/).filter(Boolean))
    if (placement) throw new OptionsError(placement)
  }
  const listed = p.capabilities?.split(',').map((c) => c.trim())
  const gpus = p.gpus === undefined ? undefined : [...new Set(p.gpus.split(',').map((g) => Number(g.trim())))]
  let ca: string | undefined
  if (p.ca_file !== undefined) {
    try {
      ca = readCaFile(p.ca_file)
    } catch (e) {
      throw new OptionsError(`--ca-file: ${(e as Error).message}`)
    }
  }
  const engineEnv = (p.engine_env ?? '')
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean)
  for (const name of engineEnv) {
    // docs/worker.md "What an engine sees": some names never reach an engine, whoever lists them.
    const why = neverPassed(name.replace(/\*$/, ''))
    if (why) throw new OptionsError(`--engine-env ${name}: never passed to engines (${why})`)
  }
  return {
    ...p,
    gpus,
    ...(p.max_jobs === undefined ? { max_jobs_default: true } : {}),
    ...(ca ? { ca } : {}),
    engine_args: (p.engine_args ?? '').split(/\s+/).filter(Boolean),
    engine_env: engineEnv,
    // docs/api.md §16: a shard-capable worker holds the current shard and the next.
    max_jobs: p.shards ? Math.max(2, p.max_jobs ?? 2) : (p.max_jobs ?? 1),
    server: p.server.replace(/\/+$/, ''),
    hub_url: p.hub_url.replace(/\/+$/, ''),
    runtime_url: managed
      ? ''
      : (p.runtime_url ?? (p.runtime === 'ollama' ? 'http://127.0.0.1:11434' : 'http://127.0.0.1:8000'))
          .replace(/\/+$/, '')
          // The job's endpoint (/v1/chat/completions) already carries the /v1.
          .replace(/\/v1$/, ''),
    engine,
    // docs/api.md §7 "Runtime capabilities": the engine's defaults unless listed.
    capabilities: listed ? CAPABILITIES.filter((c) => listed.includes(c)) : [...ENGINE_CAPABILITIES[engine]],
    ...(launched
      ? { launch_command: p.launch_command ?? DEFAULT_LAUNCH_COMMANDS[p.runtime as 'vllm' | 'sglang'] }
      : {}),
    name: p.name ?? hostname(),
    state_dir: p.state_dir ?? join(homedir(), '.gridkeep', 'worker'),
    model_files,
  }
}

function parseModelFiles(value: string, source: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const pair of value.split(',')) {
    if (!pair.trim()) continue
    const eq = pair.indexOf('=')
    if (eq <= 0 || eq === pair.length - 1)
      throw new OptionsError(`${source}: expected NAME=PATH (got ${pair})`)
    out[pair.slice(0, eq).trim()] = pair.slice(eq + 1).trim()
  }
  return out
}

/** A YAML or JSON file whose keys are the option names (snake_case or kebab-case). */
async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  const file = Bun.file(path)
  if (!(await file.exists())) throw new OptionsError(`--config: no such file ${path}`)
  const text = await file.text()
  let doc: unknown
  try {
    doc = extname(path) === '.json' ? JSON.parse(text) : Bun.YAML.parse(text)
  } catch (e) {
    throw new OptionsError(
      `--config: ${path} is not valid ${extname(path) === '.json' ? 'JSON' : 'YAML'}: ${(e as Error).message}`,
    )
  }
  if (doc === null || doc === undefined) return {}
  if (typeof doc !== 'object' || Array.isArray(doc))
    throw new OptionsError(`--config: ${path} must hold a mapping`)
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(doc)) {
    const field = k.replaceAll('-', '_') as Field
    if (!FIELDS.includes(field)) throw new OptionsError(`--config: unknown option ${k} in ${path}`)
    // Numbers in a file may be written as numbers; Value.Convert handles the strings of flags and env.
    out[field] = v
  }
  return out
}

function describe(schema: any): string {
  if (schema.pattern === Capabilities.pattern) return `expected a list of ${CAPABILITIES.join(', ')}, or none`
  if (schema.pattern === EngineEnvNames.pattern)
    return 'expected variable names (NAME or PREFIX*), comma-separated'
  if (schema.anyOf?.every((s: any) => s.const !== undefined))
    return `expected one of ${schema.anyOf.map((s: any) => s.const).join(', ')}`
  if (schema.anyOf)
    return `expected ${schema.anyOf.map((s: any) => s.const ?? describe(s).replace(/^expected /, '')).join(' or ')}`
  if (schema.type === 'integer') return `expected an integer from ${schema.minimum} to ${schema.maximum}`
  if (schema.type === 'number') return `expected a number from ${schema.minimum} to ${schema.maximum}`
  if (schema.pattern) return `expected a value matching ${schema.pattern}`
  if (schema.minLength) return `expected at least ${schema.minLength} characters`
  return `expected ${schema.type}`
}

const PLACEHOLDER: Partial<Record<Field, string>> = {
  server: 'URL',
  key: 'gk-…',
  key_file: 'FILE',
  ca_file: 'FILE',
  runtime: 'openai|ollama|llama.cpp|vllm|sglang|command',
  runtime_url: 'URL',
  models_dir: 'DIR',
  llama_server: 'PATH',
  launch_command: '"CMD"',
  engine_args: '"ARGS"',
  engine_env: 'NAME',
  engine: 'NAME',
  name: 'NAME',
  state_dir: 'DIR',
  concurrency: 'auto|N',
  max_concurrency: 'N',
  shards: 'true|false',
  max_jobs: 'N',
  vram_gb: 'GB',
  gpus: 'LIST',
  load_timeout: 'S',
  max_download_gb: 'GB',
  capabilities: 'LIST|none',
  hub_url: 'URL',
  hub_token: 'TOKEN',
  hub_token_file: 'FILE',
  progress_interval: 'S',
  poll_interval: 'S',
  poll_wait: 'S',
  request_timeout: 'S',
  retries: 'N',
  shutdown_grace: 'S',
  log_level: 'LEVEL',
}

export function helpText(): string {
  const lines = [
    'Usage: gridkeep worker --server URL --key gk-… --runtime openai|ollama [options]',
    '       gridkeep worker --server URL --key-file FILE --runtime llama.cpp --models-dir DIR [options]',
    '       gridkeep worker --server URL --key-file FILE --runtime vllm|sglang --models-dir DIR [--launch-command CMD]',
    '       gridkeep worker --server URL --key-file FILE --runtime command --engine NAME --models-dir DIR --launch-command CMD',
    '',
    'The reference worker daemon: registers with a gridkeep control plane, heartbeats, claims batches,',
    'runs every line against a local inference runtime and uploads the results. With --runtime llama.cpp',
    '--models-dir it runs llama-server itself and loads the model each batch needs; with vllm, sglang or',
    'command it starts one engine process per model it loads (docs/worker.md).',
    '',
    'Options (flags > environment > config file > defaults):',
  ]
  for (const f of FIELDS) {
    const s = (DaemonOptionsSchema.properties as any)[f]
    const flag = f === 'model_files' ? '--model-file NAME=PATH' : `${flagOf(f)} ${PLACEHOLDER[f] ?? 'VALUE'}`
    const def = s.default === undefined ? '' : ` [default ${s.default}]`
    lines.push(`  ${flag.padEnd(30)} ${s.description}${def}`)
    lines.push(`  ${''.padEnd(30)} env ${ENV_NAMES[f]}`)
  }
  lines.push(`  ${'--config FILE'.padEnd(30)} YAML or JSON file with the options above as keys`)
  lines.push(`  ${''.padEnd(30)} env ${CONFIG_ENV}`)
  lines.push(`  ${'--help'.padEnd(30)} This text`)
  return lines.join('\n')
}
