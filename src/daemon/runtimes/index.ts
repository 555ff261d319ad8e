import type { Engine } from '../../domain/catalogue'
import { engineEnv } from '../engines/env'
import { LaunchedEngine } from '../engines/launched'
import { LlamaRouter } from '../engines/llama-router'
import type { Room } from '../models/plan'
import { type DaemonOptions, isLaunched } from '../options'
import type { StateDir } from '../state'
import { DigestCache } from './digests'
import { ManagedRuntime } from './managed'
import { OllamaRuntime } from './ollama'
import { OpenAIRuntime } from './openai'
import type { Runtime } from './types'

/**
 * The runtime the options name. A managed engine places its models in `gpus.room()` (the GPU ledger,
 * or one budget: models/plan.ts); `gpus.indices()` are the daemon's GPUs (the router's devices).
 */
export function createRuntime(
  opts: DaemonOptions,
  state: StateDir,
  gpus: { room: (fresh: boolean) => Promise<Room>; indices: () => number[] | null },
): Runtime {
  const room = gpus.room
  const loadTimeoutMs = opts.load_timeout * 1000
  // docs/worker.md "What an engine sees": never the key nor the hub token.
  const env = engineEnv(process.env, { pass: opts.engine_env, secrets: [opts.key, opts.hub_token] })
  if (opts.runtime === 'llama.cpp') {
    const engine = new LlamaRouter({
      state,
      gpus: gpus.indices,
      loadTimeoutMs,
      ...(opts.models_dir !== undefined
        ? {
            managed: {
              modelsDir: opts.models_dir,
              binary: opts.llama_server,
              extraArgs: opts.engine_args,
              env,
            },
          }
        : { url: opts.runtime_url }),
    })
    return new ManagedRuntime(engine, new DigestCache(state), { state, room, downloads: downloadsOf(opts) })
  }
  if (isLaunched(opts.runtime)) {
    const engine = new LaunchedEngine({
      engine: opts.engine,
      state,
      modelsDir: opts.models_dir!,
      command: opts.launch_command!,
      extraArgs: opts.engine_args,
      loadTimeoutMs,
      env,
    })
    return new ManagedRuntime(engine, new DigestCache(state), {
      state,
      room,
      kind: 'launched',
      downloads: downloadsOf(opts),
    })
  }
  return opts.runtime === 'ollama'
    ? new OllamaRuntime(opts.runtime_url, opts.engine)
    : new OpenAIRuntime(opts.runtime_url, opts.engine, opts.model_files, new DigestCache(state))
}

/** docs/worker.md "Downloads": the hub a managed engine fetches catalogue entries from. */
const downloadsOf = (opts: DaemonOptions) => ({
  hub: { url: opts.hub_url, ...(opts.hub_token ? { token: opts.hub_token } : {}) },
  maxDownloadGb: opts.max_download_gb,
  ...(opts.models_dir !== undefined ? { modelsDir: opts.models_dir } : {}),
})

export type { InventoryItem, PullProgress, PullTask, Runtime, RuntimeSnapshot } from './types'

/**
 * Body fields every request to `engine` on `endpoint` carries unless its line sets them (docs/worker.md
 * "Prefix caching"): llama-server keeps a slot's prompt for the next request, and picks the slot whose
 * prompt is most like a new one, only for requests with `cache_prompt` (its default in recent
 * builds; asked for explicitly so an older build or a changed default does not lose it).
 */
export function requestDefaults(engine: Engine, endpoint: string): Record<string, unknown> | undefined {
  return engine === 'llama.cpp' && endpoint !== '/v1/embeddings' ? { cache_prompt: true } : undefined
}
