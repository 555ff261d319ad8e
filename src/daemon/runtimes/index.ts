import type { DaemonOptions } from '../options'
import type { StateDir } from '../state'
import { DigestCache } from './digests'
import { OllamaRuntime } from './ollama'
import { OpenAIRuntime } from './openai'
import type { Runtime } from './types'

export function createRuntime(opts: DaemonOptions, state: StateDir): Runtime {
  return opts.runtime === 'ollama'
    ? new OllamaRuntime(opts.runtime_url, opts.engine)
    : new OpenAIRuntime(opts.runtime_url, opts.engine, opts.model_files, new DigestCache(state))
}

export type { InventoryItem, PullProgress, PullTask, Runtime, RuntimeSnapshot } from './types'
