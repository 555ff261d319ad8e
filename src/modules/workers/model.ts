import { t } from 'elysia'

// Bodies of the /workers protocol (docs/api.md §7 Workers, docs/api.md §7). Every object rejects unknown
// fields; every string and array is bounded.

export const ENGINES = ['ollama', 'vllm', 'llama.cpp', 'sglang', 'tgi', 'lmstudio', 'openai'] as const
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
export type InventoryItem = typeof InventoryItem.static

const Inventory = t.Array(InventoryItem, { maxItems: 4096 })

export const WorkerModel = {
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
      capabilities: t.Optional(
        t.Object({ shards: t.Optional(t.Boolean()) }, { additionalProperties: false }),
      ),
      models: t.Optional(t.Array(ModelName, { maxItems: 1024 })),
      runtimes: t.Array(
        t.Object(
          {
            engine: Engine,
            base_url: t.String({ maxLength: 2048 }),
            status: t.Union([t.Literal('online'), t.Literal('offline'), t.Literal('error')]),
            inventory: t.Optional(Inventory),
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
              driver: t.Optional(t.Union([t.String({ maxLength: 100 }), t.Null()])),
              cuda: t.Optional(t.Union([t.String({ maxLength: 100 }), t.Null()])),
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
      current_job_id: t.Optional(t.Union([t.String({ maxLength: 64 }), t.Null()])),
      progress: t.Optional(
        t.Union([
          t.Object(
            {
              total_prompts: t.Optional(Count),
              completed_prompts: t.Optional(Count),
              failed_prompts: t.Optional(Count),
            },
            { additionalProperties: false },
          ),
          t.Null(),
        ]),
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
    },
    { additionalProperties: false },
  ),

  poll: t.Object(
    {
      worker_id: Id,
      // docs/api.md §7 (ext): hold the poll up to this long while nothing is claimable.
      wait_seconds: t.Optional(t.Number({ minimum: 0, maximum: 30 })),
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

export type RegisterBody = typeof WorkerModel.register.static
export type HeartbeatBody = typeof WorkerModel.heartbeat.static
export type ProgressBody = typeof WorkerModel.progress.static
export type ModelProgressBody = typeof WorkerModel.modelProgress.static
export type ReportFailureBody = typeof WorkerModel.reportFailure.static
