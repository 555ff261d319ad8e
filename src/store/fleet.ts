import type {
  GpuMemory,
  LoadFailure,
  ModelGpus,
  ModelPullFailureRow,
  ModelPullRow,
  ModelStat,
  WorkerGpuRow,
  WorkerModelRow,
  WorkerRow,
  WorkerRuntimeRow,
} from '../db/schema'
import type { AuditContext } from '../domain/audit'
import type { CapabilityReport } from '../domain/capabilities'
import type { HostedModel } from '../domain/inventory'
import type { RequeueOutcome } from '../domain/requeue'
import type { PageParams } from '../lib/pagination'
import type { HeadsAsk, WaitingHead } from './queue'

// The fleet's verbs (docs/api.md §12): workers and their reports, what the matching predicate reads,
// pull_models asks, and the aggregates shown by pool capacity and /metrics. What to do is decided
// above the seam — the matching predicate (domain/matching.ts), the holder and progress rules
// (domain/worker-rules.ts), the requeue rule (domain/requeue.ts), the register, inventory and sweep
// plans (domain/register-plan.ts, inventory-plan.ts, sweep.ts), liveness (modules/workers/liveness.ts);
// an engine reads and carries the decision out atomically.

/** One worker_models row as registration or a heartbeat's inventory states it. */
export interface HostedModelInput {
  name: string
  runtime: string | null
  digest: string | null
  size_bytes: number | null
  loaded: boolean
  configured: boolean
  on_disk: boolean
}

/** POST /workers/register, decided above the seam (duplicate engines refused, models merged). */
export interface Registration {
  orgId: string
  /** Re-registration by id (another org's → not owned) or, failing that, by machine_id. */
  workerId: string | undefined
  machineId: string | undefined
  fields: Pick<
    WorkerRow,
    'name' | 'hostname' | 'daemon_version' | 'key_id' | 'max_concurrent_jobs' | 'max_download_gb'
  > &
    Partial<Pick<WorkerRow, 'shards' | 'loads'>>
  runtimes: (Pick<WorkerRuntimeRow, 'engine' | 'base_url' | 'status'> &
    Partial<Pick<WorkerRuntimeRow, 'capabilities'>>)[]
  gpus: Pick<WorkerGpuRow, 'vendor' | 'name' | 'vram_gb' | 'driver' | 'cuda'>[]
  models: HostedModelInput[]
  now: number
}

export type Registered =
  | { worker: WorkerRow; reused: boolean; requeued: RequeueOutcome[] }
  | { notOwned: true }

/**
 * Heartbeats that arrive together are written together (lib/grouped.ts), at most this many per
 * commit, on both engines: 64 daemons beating at once otherwise pay 64 commits.
 */
export const HEARTBEATS_PER_COMMIT = 64

/** POST /workers/{id}/heartbeat: the reported fields; null keeps the last reported value. */
export interface Beat {
  workerId: string
  orgId: string
  activity: WorkerRow['activity']
  vram_total_gb: number | null
  vram_available_gb: number | null
  gpu_utilization: number | null
  gpu_memory_used_gb: number | null
  uptime_seconds: number | null
  loaded_models: string[]
  current_job_id: string | null
  /** The requests the daemon keeps in flight now (ext); null keeps the last reported value. */
  concurrency?: number | null
  /** docs/api.md §7 (ext): models being loaded now (omitted: none). */
  loading_models?: string[]
  /** docs/api.md §7 (ext): per-model measurements; null keeps the last reported ones. */
  model_stats?: ModelStat[] | null
  /** docs/api.md §7 (ext): each GPU's memory; null keeps the last reported. */
  gpu_memory?: GpuMemory[] | null
  /** docs/api.md §7 (ext): the GPUs of each loaded model (omitted: none known). */
  model_gpus?: ModelGpus[]
  /** docs/api.md §7 (ext): the models it does not load again yet (omitted: none). */
  load_failures?: LoadFailure[]
  now: number
  /** Seen at or before this instant = silent (workers/liveness.ts onlineCutoff). */
  cutoff: number
}

export interface BeatAnswer {
  inventory_sig: string | null
  max_download_gb: number
  /**
   * What the matching predicate judges before the models may have changed (docs/api.md §7 Poll rules 2 and
   * 6, read-time liveness): the worker was silent or offline, never heartbeated, or reported
   * another VRAM total. A steady heartbeat answers false.
   */
  fitChanged: boolean
  /** The batches the worker holds (docs/api.md §7 assigned_job_ids). */
  assigned: string[]
}

/** What both engines' heartbeat statement returns: the held batches as one comma-joined list. */
export type BeatRow = { inventory_sig: string | null; max_download_gb: number; assigned: string | null }

/** A heartbeat's answer from its statement's row; `steady`: the steady form wrote it. */
export const beatAnswer = (row: BeatRow, steady: boolean): BeatAnswer => ({
  inventory_sig: row.inventory_sig,
  max_download_gb: row.max_download_gb,
  fitChanged: !steady,
  assigned: row.assigned ? row.assigned.split(',') : [],
})

/** A pull ask as made (docs/api.md §7 pull_models); its progress columns start empty. */
export type NewPull = Omit<ModelPullRow, 'progress_status' | 'completed_bytes' | 'total_bytes'>

/** A download's step as model-progress reports it; null: finished (completed or failed). */
export type PullProgress = Pick<ModelPullRow, 'progress_status' | 'completed_bytes' | 'total_bytes'> | null

export interface ProgressReport {
  workerId: string
  jobId: string
  assignmentId: string | undefined
  total: number | undefined
  completed: number
  failed: number
  now: number
}

/** docs/api.md §7 "Worker row" before presentation: the row and its child rows. */
export interface ListedWorker extends WorkerRow {
  gpus: WorkerGpuRow[]
  runtimes: WorkerRuntimeRow[]
  models: WorkerModelRow[]
  /** docs/api.md §7 pull_models asks outstanding with this worker (its downloads). */
  pulls: ModelPullRow[]
  /** docs/api.md §7 model-progress `failed`: this worker's download back-offs. */
  pull_failures: ModelPullFailureRow[]
}

/** The predicate's head of a worker: enough to rule it out before reading its models. */
export type WorkerHead = Pick<
  WorkerRow,
  'id' | 'org_id' | 'last_heartbeat_at' | 'vram_total_gb' | 'gpu_memory' | 'last_seen_at'
>

/** docs/api.md §7 placement: one online worker that loads models itself, as the placement sees it. */
export type PlacementWorker = Pick<WorkerRow, 'id' | 'loaded_models' | 'loading_models' | 'model_stats'> & {
  /** batches.model of each batch and shard it holds now. */
  held: string[]
}

export interface WorkerHosting {
  /** Engines of the worker's runtimes. */
  engines: string[]
  /** What each runtime reported it can do, by engine (docs/api.md §7); one that reported nothing is absent. */
  reported: Record<string, CapabilityReport>
  models: HostedModel[]
}

/** docs/api.md §6 `waiting`: a worker hosting a model by name, with what the waiting rule reads of it. */
export interface NamedHost {
  worker: Pick<
    WorkerRow,
    | 'id'
    | 'org_id'
    | 'name'
    | 'status'
    | 'last_seen_at'
    | 'last_heartbeat_at'
    | 'vram_total_gb'
    | 'gpu_memory'
    | 'loading_models'
    | 'load_failures'
    | 'shards'
  >
  hosting: WorkerHosting
}

/**
 * Both engines: the hosts' heads joined with their runtimes (engines and what each reported it can
 * do, docs/api.md §7) and their model rows.
 */
export function namedHosts(
  heads: NamedHost['worker'][],
  runtimes: { worker_id: string; engine: string; capabilities: CapabilityReport | null }[],
  models: (HostedModel & { worker_id: string })[],
): NamedHost[] {
  const hosting = new Map<string, WorkerHosting>(
    heads.map((w) => [w.id, { engines: [], reported: {}, models: [] }]),
  )
  for (const r of runtimes) {
    const h = hosting.get(r.worker_id)
    if (!h) continue
    h.engines.push(r.engine)
    if (r.capabilities) h.reported[r.engine] = r.capabilities
  }
  for (const { worker_id, ...m } of models) hosting.get(worker_id)?.models.push(m)
  return heads.map((worker) => ({ worker, hosting: hosting.get(worker.id)! }))
}

/** docs/api.md §6 `waiting`: a download ask with its worker's name, org and liveness. */
export interface PullWithWorker {
  pull: ModelPullRow
  worker: Pick<WorkerRow, 'name' | 'org_id' | 'status' | 'last_seen_at'>
}

/** docs/api.md §6 `download_failed`: a worker's back-off for an entry, with its name and org. */
export interface PullFailureWithWorker {
  failure: ModelPullFailureRow
  worker: Pick<WorkerRow, 'name' | 'org_id'>
}

export interface CurrentPull {
  pull: ModelPullRow
  /** The asked worker's stored status and last_seen_at; null when it is gone. */
  status: WorkerRow['status'] | null
  last_seen_at: number | null
}

export interface CapacityCounts {
  online: number
  idle: number
  vram: number
}

/** Every worker's runtimes and hosted models, for catalogue discovery (docs/api.md §4 catalogue rule 8). */
export interface FleetInventory {
  runtimes: Pick<WorkerRuntimeRow, 'worker_id' | 'engine'>[]
  models: Pick<
    WorkerModelRow,
    'worker_id' | 'name' | 'runtime' | 'runtime_model_id' | 'digest' | 'size_bytes'
  >[]
}

export interface FleetStore {
  /** The worker row by id (ownership is judged above: docs/api.md §7, 404 / 403). */
  findWorker(id: string): Promise<WorkerRow | undefined>
  /**
   * POST /workers/register in one transaction: a re-registered worker (same id, else the org's
   * newest with the same machine_id) has what it held requeued as failed attempts (docs/api.md §7,
   * requeue rule), its row reset and child rows and pull asks replaced; else a new worker.
   */
  register(r: Registration): Promise<Registered>
  /**
   * DELETE /v1/orgs/{org_id}/workers/{worker_id} (docs/api.md §3), in one transaction: what the
   * worker holds is requeued without counting an attempt (src/domain/requeue.ts removedRequeue),
   * the row and its runtimes, GPUs, models, pull asks and back-offs deleted (its finished
   * assignments stay, as history), and its `worker.removed` entry written. Undefined when `orgId`
   * has no such worker.
   */
  removeWorker(
    orgId: string,
    workerId: string,
    now: number,
    audit: AuditContext,
  ): Promise<{ worker: WorkerRow; requeued: RequeueOutcome[] } | undefined>
  /**
   * POST /workers/{id}/heartbeat, one statement: liveness and reported fields, returning the
   * inventory signature and the held batches. Null when the worker is unknown or another org's.
   */
  heartbeat(b: Beat): Promise<BeatAnswer | null>
  /**
   * docs/api.md §7 heartbeat: the on-disk inventory replaces the previous one (configured names stay);
   * without one (older daemons) only loaded flags change. `sig` records what was applied.
   */
  replaceInventory(
    workerId: string,
    inventory: HostedModelInput[] | undefined,
    loaded: string[],
    sig: string,
  ): Promise<void>
  /** POST /workers/progress: the holder and progress rules (domain/worker-rules.ts), then the counts. */
  recordProgress(p: ProgressReport): Promise<void>
  /**
   * POST /workers/model-progress: liveness (docs/api.md §7), and the worker's ask for `model` (catalogue
   * id or runtime string) ends when finished (`null`), else its progress time and bytes move.
   */
  recordModelProgress(workerId: string, model: string, progress: PullProgress, now: number): Promise<void>
  /** GET /v1/orgs/{id}/workers (orgId) and GET /v1/admin/workers (null): newest first (docs/api.md §0). */
  listWorkers(orgId: string | null, page: PageParams): Promise<{ rows: ListedWorker[]; has_more: boolean }>

  /** `gridkeep catalogue discover`: what every worker reports hosting, in seq order. */
  reportedInventory(): Promise<FleetInventory>

  /** Workers stored online and seen after `cutoff` (liveness.ts), for the matching predicate. */
  onlineWorkers(cutoff: number): Promise<WorkerHead[]>
  /**
   * docs/api.md §7 placement: the online workers with capabilities.loads, with what each has loaded
   * or is loading, its measurements, and the models (batches.model slugs) of the batches and shards
   * it holds now (read at most once a second per server).
   */
  placementFleet(cutoff: number): Promise<PlacementWorker[]>
  /** Who hosts a model named each of `names` (docs/api.md §7 "hosts"): name → worker ids. */
  hostsOf(names: readonly string[]): Promise<Map<string, string[]>>
  /** What the predicate reads of one worker besides its head. */
  workerHosting(workerId: string): Promise<WorkerHosting>
  /**
   * POST /workers/poll (docs/api.md §7): the worker's row and what it hosts, read together (one
   * statement on PostgreSQL: the poll is every instance's hot path); the hosting is not read (null)
   * when the row's hosting_seq is `knownSeq`: the caller keeps what it derived from it. With
   * `heads`, PostgreSQL reads the waiting heads of those pairs in the same statement (the claim
   * would read them next, a round trip later); SQLite leaves them to the claim (undefined).
   */
  findWorkerWithHosting(
    id: string,
    knownSeq?: number,
    heads?: HeadsAsk,
  ): Promise<{ worker: WorkerRow; hosting: WorkerHosting | null; heads?: WaitingHead[] } | undefined>

  /**
   * docs/api.md §6 `waiting`: every worker hosting a model named any of `names` (worker_models_name_idx),
   * online or not, with its hosting; read once for every batch a request shows.
   */
  hostsNamed(names: readonly string[]): Promise<NamedHost[]>
  /** docs/api.md §6 `waiting`: the download asks for `catalogIds`, with their workers. */
  pullsFor(catalogIds: readonly string[]): Promise<PullWithWorker[]>

  /** docs/api.md §7 pull_models: the asks outstanding with `workerId`. */
  pullsOfWorker(workerId: string): Promise<ModelPullRow[]>
  /** The ask for `catalogId`, with its worker's liveness. */
  currentPull(catalogId: string): Promise<CurrentPull | undefined>
  /** Ends `workerId`'s ask for `catalogId`. */
  dropPull(catalogId: string, workerId: string): Promise<void>
  /** Whether a validated batch waits for any of the `models` (stored batches.model slugs). */
  hasValidatedBatch(models: string[]): Promise<boolean>
  /**
   * Asks `ask.worker_id` to pull `ask.catalog_id`, replacing the lapsed ask the caller saw
   * (`replacing`: its asked_at, or null when there was none). False when another ask got there
   * first: at most one worker per entry, across instances.
   */
  askPull(ask: NewPull, replacing: number | null): Promise<boolean>
  /** docs/api.md §7 model-progress `failed`: the download back-offs of `workerId`. */
  pullFailuresOfWorker(workerId: string): Promise<ModelPullFailureRow[]>
  /** docs/api.md §6 `download_failed`: the back-offs for `catalogIds`, with their workers. */
  pullFailuresFor(catalogIds: readonly string[]): Promise<PullFailureWithWorker[]>
  /** Writes the back-off of (catalog_id, worker_id), replacing the one there was (src/domain/downloads.ts). */
  setPullFailure(failure: ModelPullFailureRow): Promise<void>
  /** Ends the back-off of `workerId` for `catalogId`: its download succeeded. */
  clearPullFailure(catalogId: string, workerId: string): Promise<void>

  /** docs/api.md §8 Pool rules: counts over workers online after `cutoff`. */
  capacityCounts(cutoff: number): Promise<CapacityCounts>
  /** docs/api.md §8 Pool rule 3: GPUs of the workers online after `cutoff` (read only when shown). */
  gpusOnline(cutoff: number): Promise<number>
  /** The orgs `userId` is a member of (docs/api.md §8 Pool rule 4: org-private entries). */
  orgIdsOf(userId: string): Promise<string[]>
  /** GET /metrics gauges (docs/api.md §10): batches per status. */
  batchCounts(): Promise<{ status: string; n: number }[]>
  /** GET /metrics gauges: workers per read-time liveness (online after `cutoff`) and activity. */
  workerCounts(cutoff: number): Promise<{ status: 'online' | 'offline'; activity: string; n: number }[]>
}
