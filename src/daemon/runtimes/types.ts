// What a runtime adapter tells the agent about the inference engine it fronts (docs/api.md §7 heartbeat
// inventory; docs/api.md §7 registration runtimes). Requests themselves always go to the engine's
// OpenAI-compatible endpoints (job.endpoint on base_url), whichever adapter discovered it.

import type { Engine } from '../../domain/catalogue'
import type { InventoryItem, PullModel } from '../../protocol/worker'
import type { ModelManager } from '../models/manager'

/** docs/api.md §7 inventory item: one on-disk artifact with the sha256 of its file. */
export type { InventoryItem }

export type RuntimeStatus = 'online' | 'offline' | 'error'

export interface RuntimeSnapshot {
  status: RuntimeStatus
  /** Artifacts whose sha256 is known (an item without a hash would be a lie about the file). */
  inventory: InventoryItem[]
  /** Every model name the engine can serve, with or without a known digest (advertised `models`). */
  models: string[]
  /** Names loaded in VRAM (heartbeat `loaded_models`). */
  loaded: string[]
  /** Why the status is not online. */
  error?: string
}

/** One heartbeat `pull_models` entry (docs/api.md §7), as the protocol defines it. */
export type PullTask = PullModel

export interface PullProgress {
  status: 'downloading' | 'verifying' | 'completed' | 'failed'
  completed_bytes?: number
  total_bytes?: number
}

export interface Runtime {
  /** The adapter; `launched`: one engine process per loaded model (engines/launched.ts). */
  readonly kind: 'openai' | 'ollama' | 'llama.cpp' | 'launched'
  /** Engine name reported to the server (docs/api.md §7 engine names). */
  readonly engine: Engine
  /** Base URL without /v1; job requests go to baseUrl + job.endpoint. */
  readonly baseUrl: string
  /** Work worth doing once before registering (hashing model files). */
  prepare(): Promise<void>
  snapshot(): Promise<RuntimeSnapshot>
  /** Whether the engine can serve `model` right now (checked before a job starts). */
  serves(model: string, snapshot: RuntimeSnapshot): boolean
  /** Calls `listener` when the inventory changed between snapshots (a model file finished hashing). */
  onInventoryChange?(listener: () => void): void
  /**
   * How many requests the engine serves in parallel, when it says (llama.cpp GET /props
   * total_slots); null when it answers without that figure; throws when it cannot be reached.
   * A managed engine answers per loaded model (`model`, loaded with `params`).
   */
  slots?(model?: string, params?: Record<string, unknown>): Promise<number | null>
  /**
   * Readies the engine for a job whose serving profile carries `params` (an Ollama's options,
   * docs/worker.md "Ollama"): the name the job's requests must carry, and what to do once its last
   * request is answered. Absent: requests carry the job's model as it is (a managed engine applies
   * params when it loads the model; any other engine is configured by whoever runs it).
   */
  prepareJob?(
    job: { model: string; params: Record<string, unknown> },
    signal: AbortSignal,
  ): Promise<JobEngine>
  /** Materialises a catalogued model the engine lacks; absent when the engine cannot pull. */
  pull?(task: PullTask, onProgress: (p: PullProgress) => void, signal?: AbortSignal): Promise<void>
  /**
   * A managed engine's model manager (models/manager.ts): the daemon loads the model each job needs
   * (registered with capabilities.loads). Absent for an engine someone else loads.
   */
  readonly manager?: ModelManager
  /** Ends what prepare() started (a managed engine's process); called when the daemon stops. */
  close?(): Promise<void>
}

/** What prepareJob readied: the model name to send, and the step after the job's last request. */
export interface JobEngine {
  model: string
  /** Never throws: what it cannot do is logged. */
  finish?: () => Promise<void>
}

export class RuntimeHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}

const SNAPSHOT_TIMEOUT_MS = 10_000

/** GET/POST JSON from the runtime with a time limit. */
export async function runtimeJson<T>(
  url: string,
  init: { method?: string; body?: unknown; timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<T> {
  const timeout = AbortSignal.timeout(init.timeoutMs ?? SNAPSHOT_TIMEOUT_MS)
  const res = await fetch(url, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers: init.body === undefined ? {} : { 'content-type': 'application/json' },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    signal: init.signal ? AbortSignal.any([init.signal, timeout]) : timeout,
  })
  const text = await res.text()
  if (!res.ok) throw new RuntimeHttpError(res.status, `${url} answered ${res.status}: ${text.slice(0, 200)}`)
  try {
    return JSON.parse(text) as T
  } catch {
    throw new RuntimeHttpError(res.status, `${url} answered with invalid JSON`)
  }
}

/** offline when the engine cannot be reached at all, error when it answers wrongly. */
export const statusOf = (e: unknown): RuntimeStatus => (e instanceof RuntimeHttpError ? 'error' : 'offline')

/** The snapshot of an engine that could not be read: nothing served, and why. */
export const unreadSnapshot = (e: unknown): RuntimeSnapshot => ({
  status: statusOf(e),
  inventory: [],
  models: [],
  loaded: [],
  error: (e as Error).message,
})

/**
 * The longest line the daemon reads (job input, pull progress): the largest MAX_LINE_BYTES the
 * server accepts (src/config.ts), so every line a validated batch can hold fits.
 */
export const MAX_INPUT_LINE_BYTES = 256 * 1024 * 1024
