// The environment an engine process runs with (docs/worker.md "What an engine sees"): an allow-list,
// as systemd's PassEnvironment= and sudo's env_reset keep one, never the daemon's whole environment.
// An engine runs a model repository's code (vLLM's trust_remote_code), so it must not be able to
// read the organization's worker key or the hub token.
//
// Passed: the names below (what an engine needs to find its libraries, its GPUs and its caches),
// every name an admin lists with --engine-env (NAME, or PREFIX* for a family), and the GPU set the
// daemon gives the process (set by the caller on top). Never passed, whatever lists it: a GRIDKEEP_*
// name, a hub token's names, or any variable whose value holds the worker key or the hub token.

/** Names passed as they are. */
export const ENGINE_ENV_NAMES = [
  // Finding programs and libraries, the user, the locale, the time zone, scratch space.
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'LANG',
  'LANGUAGE',
  'TZ',
  'TMPDIR',
  'LD_LIBRARY_PATH',
  // A Python engine's environment (vLLM, SGLang in a virtualenv or conda).
  'VIRTUAL_ENV',
  'CONDA_PREFIX',
  'PYTHONPATH',
  // Cache directories (they hold downloaded code and kernels, no credential).
  'XDG_CACHE_HOME',
  'HF_HOME',
  'HF_HUB_CACHE',
  'HF_HUB_OFFLINE',
  'TRANSFORMERS_CACHE',
  'TORCH_HOME',
  'TRITON_CACHE_DIR',
  'OMP_NUM_THREADS',
] as const

/**
 * Families passed by prefix: locale, NVIDIA's and AMD's driver and device settings, NCCL (tensor
 * parallel over several GPUs), llama.cpp's ggml. A name of these families that reads like a
 * credential (NVIDIA_API_KEY) is not passed by its prefix: it must be listed by name.
 */
export const ENGINE_ENV_PREFIXES = [
  'LC_',
  'CUDA_',
  'NVIDIA_',
  'NCCL_',
  'HIP_',
  'ROCR_',
  'HSA_',
  'GGML_',
] as const

const CREDENTIAL = /TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)|API_?KEY/i

/** Hub tokens (and the file of one) under the names Hugging Face's tools read them (the daemon's --hub-token is HF_TOKEN, --hub-token-file HF_TOKEN_PATH). */
const HUB_TOKEN_NAMES = new Set(['HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN', 'HF_API_TOKEN', 'HF_TOKEN_PATH'])

/** Why `name` may never be passed to an engine, or null when it may (options.ts checks --engine-env). */
export function neverPassed(name: string): string | null {
  if (name.toUpperCase().startsWith('GRIDKEEP_')) return 'GRIDKEEP_* variables are the daemon’s own'
  if (HUB_TOKEN_NAMES.has(name.toUpperCase())) return 'the hub token stays with the daemon'
  return null
}

export interface EngineEnvPolicy {
  /** --engine-env: more names to pass (NAME, or PREFIX* for every name it begins). */
  pass?: readonly string[]
  /** Values never passed under any name: the worker key, the hub token. */
  secrets?: readonly (string | undefined)[]
}

/** The environment an engine process gets from the daemon's `parent` environment. */
export function engineEnv(
  parent: Record<string, string | undefined>,
  policy: EngineEnvPolicy = {},
): Record<string, string> {
  // A value holding a secret (a URL with the key in it) goes too; a short string would match by chance.
  const secrets = (policy.secrets ?? []).filter((s): s is string => !!s && s.length >= 8)
  const listed = (name: string) =>
    (policy.pass ?? []).some((p) => (p.endsWith('*') ? name.startsWith(p.slice(0, -1)) : name === p))
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(parent)) {
    if (value === undefined || neverPassed(name) !== null || secrets.some((s) => value.includes(s))) continue
    const allowed =
      (ENGINE_ENV_NAMES as readonly string[]).includes(name) ||
      (ENGINE_ENV_PREFIXES.some((p) => name.startsWith(p)) && !CREDENTIAL.test(name)) ||
      listed(name)
    if (allowed) out[name] = value
  }
  return out
}

const ENV_ASSIGNMENT = /^([A-Za-z_][A-Za-z0-9_]*)=/

/** Whether a flag (`--api-key`, `--hf-token`) or a variable's name reads like a credential. */
const credentialName = (name: string) => CREDENTIAL.test(name.replace(/^-+/, '').replaceAll('-', '_'))

/**
 * An engine's argv as logs and errors show it: the value of a flag or a `NAME=VALUE` whose name
 * reads like a credential (`--api-key X`, `--hf-token=X`, `API_KEY=X`) becomes `…`.
 */
export function redactArgv(argv: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!
    const eq = word.indexOf('=')
    const name = word.startsWith('-') ? (eq > 0 ? word.slice(0, eq) : word) : ENV_ASSIGNMENT.exec(word)?.[1]
    if (!name || !credentialName(name)) out.push(word)
    else if (eq > 0) out.push(`${word.slice(0, eq)}=…`)
    else {
      out.push(word)
      if (i + 1 < argv.length) {
        out.push('…')
        i++
      }
    }
  }
  return out
}
