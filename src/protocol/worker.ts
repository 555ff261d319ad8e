import { type Static, Type as t } from '@sinclair/typebox'
import { ENGINES } from '../domain/catalogue'

// The worker protocol (docs/api.md §7 Workers), written once: the bodies a daemon sends and the
// answers the server gives. The routes validate with these schemas (src/modules/workers/index.ts),
// the daemon's client is typed from them (src/daemon/client.ts), and the daemon tests' fake control
// plane checks every body it receives against them (test/helpers/fake-control-plane.ts). Plain
// TypeBox, no server imports: the daemon is a separate program.
//
// Every body object rejects unknown fields; every string and array is bounded. Answers are open
// (a newer server may add a field an older daemon ignores).

export const Engine = t.Union(
  ENGINES.map((e) => t.Literal(e)),
  { description: 'Inference engine' },
)

const Id = t.String({ minLength: 1, maxLength: 64 })
const ModelName = t.String({ minLength: 1, maxLength: 512 })
const Sha256 = t.String({
  pattern: '^(?:[sS][hH][aA]256:)?[0-9a-fA-F]{64}$',
  description: '64 hex characters, optionally prefixed by sha256:',
})
const Count = t.Integer({ minimum: 0, maximum: 2 ** 31 - 1 })
const Gb = t.Number({ minimum: 0, maximum: 1_000_000 })
// A multipart text field (src/lib/multipart.ts bounds each to 1 KiB).
const Field = t.String({ minLength: 1, maxLength: 1024 })
const GpuIndex = t.Integer({ minimum: 0, maximum: 1023 })
const Nullable = <S extends Parameters<typeof t.Union>[0][number]>(s: S) => t.Union([s, t.Null()])

export const InventoryItem = t.Object(
  {
    local_name: ModelName,
    sha256: Sha256,
    size_bytes: t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
    loaded: t.Boolean(),
    runtime: Engine,
  },
  { additionalProperties: false },
)
export type InventoryItem = Static<typeof InventoryItem>

const Inventory = t.Array(InventoryItem, { maxItems: 4096 })

/** docs/api.md §7 request bodies (and the heartbeat's path parameter). */
export const WorkerBodies = {
  params: t.Object({ worker_id: Id }),

  register: t.Object(
    {
      name: t.String({ minLength: 1, maxLength: 200 }),
      hostname: t.Optional(t.String({ maxLength: 253 })),
      machine_id: t.Optional(t.String({ minLength: 1, maxLength: 200 })),
      worker_id: t.Optional(Id),
      daemon_version: t.Optional(t.String({ maxLength: 100 })),
      max_concurrent_jobs: t.Optional(t.Integer({ minimum: 1, maximum: 1024 })),
      max_download_gb: t.Optional(Gb),
      // docs/api.md §16 (ext): a worker that declares shards is handed shards of split batches.
      // docs/api.md §7 (ext): `loads` — the daemon loads and unloads the models it holds itself.
      capabilities: t.Optional(
        t.Object(
          { shards: t.Optional(t.Boolean()), loads: t.Optional(t.Boolean()) },
          { additionalProperties: false },
        ),
      ),
      models: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
      runtimes: t.Array(
        t.Object(
          {
            engine: Engine,
            base_url: t.String({ maxLength: 2048 }),
            status: t.Union([t.Literal('online'), t.Literal('offline'), t.Literal('error')]),
            inventory: t.Optional(Inventory),
            // docs/api.md §7 (ext): what this engine can do; a missing key is the engine's default.
            capabilities: t.Optional(
              t.Object(
                {
                  json_mode: t.Optional(t.Boolean()),
                  vision: t.Optional(t.Boolean()),
                  embeddings: t.Optional(t.Boolean()),
                  logprobs: t.Optional(t.Boolean()),
                },
                { additionalProperties: false },
              ),
            ),
          },
          { additionalProperties: false },
        ),
        { maxItems: 16 },
      ),
      gpus: t.Optional(
        t.Array(
          t.Object(
            {
              vendor: t.String({ maxLength: 100 }),
              name: t.String({ maxLength: 200 }),
              vram_gb: Gb,
              driver: t.Optional(Nullable(t.String({ maxLength: 100 }))),
              cuda: t.Optional(Nullable(t.String({ maxLength: 100 }))),
              // (ext) nvidia-smi's index: what the heartbeat's gpus and model_gpus name it by.
              index: t.Optional(GpuIndex),
            },
            { additionalProperties: false },
          ),
          { maxItems: 64 },
        ),
      ),
    },
    { additionalProperties: false },
  ),

  heartbeat: t.Object(
    {
      activity: t.Union([t.Literal('idle'), t.Literal('busy'), t.Literal('downloading_model')]),
      current_job_id: t.Optional(Nullable(t.String({ maxLength: 64 }))),
      progress: t.Optional(
        Nullable(
          t.Object(
            {
              total_prompts: t.Optional(Count),
              completed_prompts: t.Optional(Count),
              failed_prompts: t.Optional(Count),
            },
            { additionalProperties: false },
          ),
        ),
      ),
      gpu_utilization: t.Optional(t.Number({ minimum: 0, maximum: 100 })),
      gpu_memory_used_gb: t.Optional(Gb),
      vram_total_gb: t.Optional(Gb),
      vram_available_gb: t.Optional(Gb),
      loaded_models: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
      inventory: t.Optional(Inventory),
      uptime_seconds: t.Optional(t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER })),
      // (ext) The requests the daemon keeps in flight now (its concurrency, found or pinned).
      concurrency: t.Optional(t.Integer({ minimum: 1, maximum: 65_536 })),
      // docs/api.md §7 (ext): the models being loaded now, and what the daemon measured per model.
      loading_models: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
      model_stats: t.Optional(
        t.Array(
          t.Object(
            {
              name: ModelName,
              load_seconds: t.Optional(t.Number({ minimum: 0, maximum: 86_400 * 7 })),
              requests_per_second: t.Optional(t.Number({ minimum: 0, maximum: 1_000_000 })),
            },
            { additionalProperties: false },
          ),
          { maxItems: 1024 },
        ),
      ),
      // docs/api.md §7 (ext): each GPU's memory now (omitted keeps the last), and the GPUs each
      // loaded model sits on (omitted means none known).
      gpus: t.Optional(
        t.Array(
          t.Object(
            {
              index: GpuIndex,
              memory_used_gb: Gb,
              memory_total_gb: Gb,
              utilization: t.Optional(t.Number({ minimum: 0, maximum: 100 })),
            },
            { additionalProperties: false },
          ),
          { maxItems: 64 },
        ),
      ),
      model_gpus: t.Optional(
        t.Array(
          t.Object(
            { name: ModelName, gpus: t.Array(GpuIndex, { maxItems: 64 }) },
            { additionalProperties: false },
          ),
          { maxItems: 1024 },
        ),
      ),
      // docs/api.md §7 (ext): the models that failed to load on the worker and that it does not try
      // to load again yet — why, how many times in a row, and for how many seconds more (omitted: none).
      load_failures: t.Optional(
        t.Array(
          t.Object(
            {
              name: ModelName,
              error: t.String({ maxLength: 4000 }),
              failures: t.Integer({ minimum: 1, maximum: 1_000_000 }),
              retry_in_seconds: t.Integer({ minimum: 0, maximum: 86_400 * 7 }),
            },
            { additionalProperties: false },
          ),
          { maxItems: 1024 },
        ),
      ),
    },
    { additionalProperties: false },
  ),

  poll: t.Object(
    {
      worker_id: Id,
      // docs/api.md §7 (ext): hold the poll up to this long while nothing is claimable.
      wait_seconds: t.Optional(t.Number({ minimum: 0, maximum: 30 })),
      // docs/api.md §7 placement (ext): a GPU of the worker holds no model in use, so it can load
      // another model beside the ones it serves.
      spare_gpu: t.Optional(t.Boolean()),
      // docs/api.md §7 placement (ext): the models loaded (or being loaded) on the worker now, as it
      // polls: the placement counts them as its current models (a heartbeat's list may lag).
      loaded_models: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
      // …and of them, those a job is using now (the others sit idle on their GPUs).
      models_in_use: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
      // docs/api.md §7 (ext): the models that failed to load on the worker and that it does not try
      // to load again yet: no batch of them is claimed for it by this poll.
      failed_models: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
    },
    { additionalProperties: false },
  ),

  progress: t.Object(
    {
      worker_id: Id,
      job_id: Id,
      assignment_id: t.Optional(Id),
      total_prompts: t.Optional(Count),
      completed_prompts: Count,
      failed_prompts: Count,
    },
    { additionalProperties: false },
  ),

  modelProgress: t.Object(
    {
      worker_id: Id,
      model: ModelName,
      digest: t.Optional(Sha256),
      status: t.Union([
        t.Literal('downloading'),
        t.Literal('verifying'),
        t.Literal('completed'),
        t.Literal('failed'),
      ]),
      completed_bytes: t.Optional(t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER })),
      total_bytes: t.Optional(t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER })),
      // (ext) Why a download failed (a digest mismatch, the hub's answer, no disk space).
      error: t.Optional(t.String({ maxLength: 2000 })),
      // (ext) With `failed`: `stopped`, the daemon stopped it (shutting down; no back-off);
      // `backed_off`, the daemon refused the ask while its own back-off runs (docs/api.md §7).
      cause: t.Optional(t.Union([t.Literal('stopped'), t.Literal('backed_off')])),
    },
    { additionalProperties: false },
  ),

  /**
   * docs/api.md §7 Upload results: the text fields of the multipart body (the file is `file`).
   * Multipart fields are strings; the server reads the counts as integers (src/modules/workers/results.ts).
   */
  uploadResults: t.Object(
    {
      job_id: Field,
      worker_id: Field,
      assignment_id: t.Optional(t.String({ maxLength: 1024 })),
      completed: t.Optional(t.String({ pattern: '^\\s*[0-9]{1,10}\\s*$' })),
      failed: t.Optional(t.String({ pattern: '^\\s*[0-9]{1,10}\\s*$' })),
    },
    { additionalProperties: false },
  ),

  reportFailure: t.Object(
    {
      job_id: Id,
      worker_id: Id,
      // Stored truncated to 2000 characters; the request may carry a longer trace.
      error: t.String({ maxLength: 65_536 }),
      assignment_id: t.Optional(Id),
    },
    { additionalProperties: false },
  ),
}

export type RegisterBody = Static<typeof WorkerBodies.register>
export type HeartbeatBody = Static<typeof WorkerBodies.heartbeat>
export type PollBody = Static<typeof WorkerBodies.poll>
export type ProgressBody = Static<typeof WorkerBodies.progress>
export type ModelProgressBody = Static<typeof WorkerBodies.modelProgress>
export type UploadResultsFields = Static<typeof WorkerBodies.uploadResults>
export type ReportFailureBody = Static<typeof WorkerBodies.reportFailure>

/** One heartbeat `pull_models` entry (docs/api.md §7): a model the server asks an idle worker to fetch. */
export const PullModel = t.Object({
  catalogue_id: t.String(),
  runtime: t.String(),
  runtime_model_id: t.String(),
  digest: t.Optional(Nullable(t.String())),
  size_gb: t.Optional(Nullable(t.Number())),
  // (ext) Where a hub download fetches from, and the files it must verify (docs/api.md §7 pull_models).
  vram_gb: t.Optional(Nullable(t.Number())),
  source_type: t.Optional(Nullable(t.String())),
  source_ref: t.Optional(Nullable(t.String())),
  source_revision: t.Optional(Nullable(t.String())),
  files: t.Optional(
    t.Array(
      t.Object({ path: t.String(), sha256: t.String(), size_bytes: t.Optional(Nullable(t.Integer())) }),
    ),
  ),
})
export type PullModel = Static<typeof PullModel>

/** A claimed batch, or a shard of one (docs/api.md §7 poll; docs/api.md §16 `batch_id`, `shard`). */
export const Job = t.Object({
  job_id: t.String(),
  assignment_id: t.Optional(t.String()),
  input_file_id: t.String(),
  input_path: t.String(),
  model: t.String(),
  catalogue_id: t.Optional(t.String()),
  endpoint: t.Optional(t.String()),
  runtime: t.Optional(t.String()),
  digest: t.Optional(Nullable(t.String())),
  params: t.Optional(t.Record(t.String(), t.Unknown())),
  /** (ext) The entry's VRAM need: the daemon's load budget (docs/worker.md). */
  vram_gb: t.Optional(Nullable(t.Number())),
  total_requests: t.Optional(t.Integer()),
  /** docs/api.md §16: the batch a shard belongs to (a shard's job_id is its own). */
  batch_id: t.Optional(t.String()),
  shard: t.Optional(t.Object({ index: t.Integer(), first_request: t.Integer(), requests: t.Integer() })),
  /** docs/api.md §16: a backup copy of a shard another worker holds (its own assignment_id). */
  backup: t.Optional(t.Boolean()),
  /**
   * (ext) docs/api.md §7 placement rule 5: claimed for a spare GPU, of a model the worker is busy
   * with whose waiting work pays for one more copy of it there.
   */
  copy: t.Optional(t.Boolean()),
})
export type Job = Static<typeof Job>

const RequestCounts = t.Object({ total: t.Integer(), completed: t.Integer(), failed: t.Integer() })

/** docs/api.md §7 answers, by call. */
export const WorkerAnswers = {
  register: t.Object({
    worker_id: t.String(),
    org_id: t.String(),
    heartbeat_interval_seconds: t.Number(),
    heartbeat_timeout_seconds: t.Number(),
  }),
  heartbeat: t.Object({
    status: t.String(),
    worker_id: t.String(),
    next_heartbeat_in: t.Optional(t.Number()),
    assigned_job_ids: t.Optional(t.Array(t.String())),
    pull_models: t.Optional(t.Array(PullModel)),
  }),
  // (ext) With no job, the downloads this worker is asked to make now (docs/api.md §7 pull_models).
  poll: t.Object({ job: Nullable(Job), pull_models: t.Optional(t.Array(PullModel)) }),
  progress: t.Object({ status: t.String() }),
  modelProgress: t.Object({ status: t.String() }),
  uploadResults: t.Object({
    batch_id: t.String(),
    /** docs/api.md §16: the shard a shard upload answered. */
    job_id: t.Optional(t.String()),
    status: t.String(),
    output_file_id: t.Optional(Nullable(t.String())),
    error_file_id: t.Optional(Nullable(t.String())),
    request_counts: t.Optional(RequestCounts),
    usage: t.Optional(t.Record(t.String(), t.Number())),
  }),
  reportFailure: t.Object({
    status: t.String(),
    batch_id: t.String(),
    attempts: t.Integer(),
    error: t.String(),
  }),
}

export type RegisterAnswer = Static<typeof WorkerAnswers.register>
export type HeartbeatAnswer = Static<typeof WorkerAnswers.heartbeat>
export type PollAnswer = Static<typeof WorkerAnswers.poll>
export type UploadResultsAnswer = Static<typeof WorkerAnswers.uploadResults>
export type ReportFailureAnswer = Static<typeof WorkerAnswers.reportFailure>
