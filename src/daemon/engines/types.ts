import type { Engine } from '../../domain/catalogue'
import type { DownloadFile } from '../../domain/downloads'
import type { ModelLayout } from '../download'

// A managed engine (docs/worker.md "Managed engines"): an inference engine whose models the daemon
// loads and unloads itself, as the jobs it claims need them. Two layers, so that another kind of
// engine plugs in without touching the rest:
//
// - ManagedEngine (this file) is what one kind of engine does: start or adopt its process(es),
//   say which models are on disk and where each stands, load one with a serving profile's params,
//   unload one, and tell where requests for a model go. It decides nothing.
//   · llama.cpp's router (engines/llama-router.ts): ONE process (`llama-server --models-dir`) that
//     starts a child per loaded model behind one URL; or an attached router someone else runs.
//   · A per-model engine such as `vllm serve` (engines/launched.ts): one process per loaded model,
//     each on its own port and GPU set: start() adopts or stops what a killed run left, status()
//     lists the models directory and each process's state, load() spawns the model's process and
//     waits for its health, unload() stops it, urlOf() is that process's URL. Its processes are
//     supervised children as the router is (engines/child.ts, one supervisor for both).
// - ModelManager (models/manager.ts) is engine-agnostic: the table of models (on disk, loading,
//   loaded, failed; the jobs using each; when each was last used; the GPUs each sits on), the GPU
//   ledger and the LRU choice of where to load and what to unload (models/plan.ts, a pure rule),
//   and the measurements heartbeats report.
//   It is the only caller of load() and unload().

/** Where a model stands in the engine. */
export type EngineModelState = 'unloaded' | 'loading' | 'loaded' | 'failed'

/**
 * One model the engine can serve (a file, or a directory of files, in its models directory), or a
 * further copy of one running on other GPUs (`copy_of`: docs/worker.md "GPUs", copies).
 */
export interface EngineModel {
  /**
   * What requests carry in `body.model`: the catalogue's runtime_model_id; for a copy, the name the
   * daemon knows it by (copyName()), its requests carrying `copy_of`.
   */
  name: string
  /** The model this is a further copy of; absent for a model itself. */
  copy_of?: string
  state: EngineModelState
  /** Its files, the weights first (hashed for the inventory); empty when they are not readable here. */
  files: string[]
  /** Why its last load failed (state `failed`): the engine's own words. */
  error?: string
}

/** The engine's view now. */
export interface EngineView {
  /**
   * `online` when it answers; `offline` when it cannot be reached (not started, restarting);
   * `error` when it answers wrongly (runtimes/types.ts RuntimeStatus).
   */
  status: 'online' | 'offline' | 'error'
  /** Why it is not online. */
  error?: string
  models: EngineModel[]
}

/** A load the engine refused or that failed in it; `message` carries the engine's reason. */
export class LoadFailed extends Error {}

/**
 * Where a load runs, as the model manager placed it (models/plan.ts): the GPUs it is given, by
 * nvidia-smi index (CUDA_VISIBLE_DEVICES of a launched engine, the `device` list of a router's
 * model); null when the daemon knows no GPUs (the engine uses what it finds).
 */
export interface LoadPlacement {
  gpus: number[] | null
  /** The model `name` is a further copy of (only for an engine with `copies`). */
  copy_of?: string
}

/** The name the daemon knows the `n`th copy of `model` by (n ≥ 2); the first is the model's own name. */
export const copyName = (model: string, n: number) => `${model}#${n}`

export interface ManagedEngine {
  /** The engine name reported to the server (docs/api.md §7 runtimes[].engine). */
  readonly engine: Engine
  /** Its base URL (registration `base_url`); requests for a model go to urlOf(name). */
  readonly baseUrl: string
  /**
   * Whether load() applies serving-profile params (docs/api.md §4); false for an engine the daemon
   * attached to and does not configure.
   */
  readonly appliesParams: boolean
  /**
   * Whether it can run further copies of a model, each its own process on other GPUs (a launched
   * engine can; llama.cpp's router serves a model once).
   */
  readonly copies?: boolean
  /** Starts the engine (or adopts what a killed run of this daemon left), or checks an attached one. */
  start(): Promise<void>
  /** Stops what start() started; an attached engine is left running. */
  stop(): Promise<void>
  /** Every model on disk and where it stands, as the engine says now: the table's source of truth. */
  status(): Promise<EngineView>
  /**
   * Loads `name` with `params` (serving-profile keys, src/domain/serving-params.ts) on the GPUs of
   * `placement` and resolves once it answers requests; throws LoadFailed with the engine's reason
   * (`gave up loading <name> after N s` when it went silent past the load timeout: it is stopped
   * first). `signal` stops waiting, not the load.
   */
  load(
    name: string,
    params: Record<string, unknown>,
    placement: LoadPlacement,
    signal?: AbortSignal,
  ): Promise<void>
  /** Unloads `name`; resolves once its memory is given back. */
  unload(name: string): Promise<void>
  /** The base URL requests for `name` go to (the job's endpoint is appended). */
  urlOf(name: string): string
  /** The engine's last output lines about `name` (all of its output when not given), for errors. */
  lastLines(name?: string): string
  /**
   * Calls `listener` when the engine or a model's process ended without being asked, with why (its
   * last lines) and the models that went with it (null: every model; the router restarts itself).
   */
  onExit(listener: (reason: string, models: string[] | null) => void): void
  /**
   * Parallel request slots of a loaded model, when the engine says (the router's `/props`, a
   * launched engine's `max_num_seqs`, the profile's `parallel`); null when it does not.
   */
  slots?(name: string): Promise<number | null>
  /**
   * Where a downloaded model's files land (docs/worker.md "Downloads"), named as the engine will
   * serve them; null (or absent) when the engine has no models directory of this daemon's (an
   * attached engine). After a download, status() must list the model (the engine rescans).
   */
  readonly layoutFor?: ((name: string, files: readonly DownloadFile[]) => ModelLayout) | null
}
