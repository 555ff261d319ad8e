import {
  bigint,
  bigserial,
  boolean,
  doublePrecision,
  index,
  integer,
  pgTable,
  primaryKey,
  text,
  unique,
} from 'drizzle-orm/pg-core'
import type { GpuMemory, LoadFailure, ModelGpus, ModelStat } from '../../schema/workers'
import { jsonb } from '../jsonb'
import { organizations } from './accounts'
import { catalogEntries } from './catalogue'

// Workers and their child rows (docs/api.md §7 "Worker", docs/api.md §7). `status` is the stored liveness;
// anything shown to users is re-checked against last_seen_at at read time (docs/api.md §8 Pool rule 2).

export const workers = pgTable(
  'workers',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    org_id: text()
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    key_id: text(), // the worker key that registered it (informational)
    name: text().notNull(),
    hostname: text(),
    machine_id: text(),
    daemon_version: text(),
    status: text({ enum: ['online', 'offline'] }).notNull(),
    activity: text({ enum: ['idle', 'busy', 'downloading_model'] })
      .notNull()
      .default('idle'),
    vram_total_gb: doublePrecision(),
    vram_available_gb: doublePrecision(),
    gpu_utilization: doublePrecision(),
    gpu_memory_used_gb: doublePrecision(),
    loaded_models: jsonb().$type<string[]>().notNull().default([]),
    // Hash of the last inventory + loaded_models applied to worker_models: an unchanged report
    // (the common heartbeat) skips rewriting the child rows.
    inventory_sig: text(),
    // Bumped whenever the worker's runtime and model rows change (registration, a new inventory): a
    // server keeps what a poll derives from them while it holds (src/modules/workers/match-cache.ts).
    hosting_seq: integer().notNull().default(0),
    current_job_id: text(),
    uptime_seconds: integer(),
    max_concurrent_jobs: integer().notNull().default(1),
    max_download_gb: doublePrecision().notNull().default(0),
    // docs/api.md §16: registered with capabilities.shards (handed shards of split batches).
    shards: boolean().notNull().default(false),
    // The requests the daemon keeps in flight now, as its last heartbeat reported (null: never).
    concurrency: integer(),
    // docs/api.md §7: registered with capabilities.loads (loads and unloads the models it holds).
    loads: boolean().notNull().default(false),
    // docs/api.md §7 heartbeat loading_models and model_stats, as last reported.
    loading_models: jsonb().$type<string[]>().notNull().default([]),
    model_stats: jsonb().$type<ModelStat[]>().notNull().default([]),
    // docs/api.md §7 heartbeat gpus and model_gpus (ext): each GPU's memory, the GPUs of each loaded model.
    gpu_memory: jsonb().$type<GpuMemory[]>().notNull().default([]),
    model_gpus: jsonb().$type<ModelGpus[]>().notNull().default([]),
    // docs/api.md §7 heartbeat load_failures (ext): the models it does not load again yet.
    load_failures: jsonb().$type<LoadFailure[]>().notNull().default([]),
    registered_at: bigint({ mode: 'number' }).notNull(),
    last_heartbeat_at: bigint({ mode: 'number' }), // null = never heartbeated (docs/api.md §7 Poll rule 6)
    last_seen_at: bigint({ mode: 'number' }).notNull(), // liveness: register, heartbeat, model-progress
  },
  // No index on (status, last_seen_at): every heartbeat moves last_seen_at, and keeping such an
  // index current tripled the pages each heartbeat writes. The sweeper and pool capacity scan
  // the table instead (10,000 workers: a few ms).
  (t) => [index('workers_org_machine').on(t.org_id, t.machine_id)],
)

export const workerRuntimes = pgTable(
  'worker_runtimes',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    worker_id: text()
      .notNull()
      .references(() => workers.id, { onDelete: 'cascade' }),
    engine: text().notNull(),
    base_url: text().notNull(),
    status: text({ enum: ['online', 'offline', 'error'] }).notNull(),
    // docs/api.md §7: the capabilities the daemon reported for this engine (null: none reported,
    // the engine's defaults apply; src/domain/capabilities.ts runtimeCapabilities).
    capabilities: jsonb().$type<Record<string, boolean>>(),
  },
  (t) => [unique('worker_runtimes_engine').on(t.worker_id, t.engine)],
)

// One row per model a worker hosts (docs/api.md §7 "hosts"): named in the registration `models`, on
// disk in the latest inventory, or reported loaded. name is the runtime's model string
// (registration name or inventory local_name); digest is normalized (64 lowercase hex).
export const workerModels = pgTable(
  'worker_models',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    worker_id: text()
      .notNull()
      .references(() => workers.id, { onDelete: 'cascade' }),
    name: text().notNull(),
    runtime: text(), // engine hosting it, when the inventory says
    runtime_model_id: text(),
    digest: text(),
    size_bytes: bigint({ mode: 'number' }),
    status: text().notNull().default('available'), // on-disk status
    loaded: boolean().notNull().default(false),
    // Known at registration (models list or registration inventory): docs/api.md §7 Poll rule 6.
    advertised: boolean().notNull().default(false),
    // Named in the registration `models` list: survives inventory replacement.
    configured: boolean().notNull().default(false),
    // In the latest inventory (registration, then each heartbeat that carries one).
    on_disk: boolean().notNull().default(false),
  },
  // (name, worker_id): "who hosts this name?" is answered from the index alone.
  (t) => [
    unique('worker_models_name').on(t.worker_id, t.name),
    index('worker_models_name_idx').on(t.name, t.worker_id),
  ],
)

export const workerGpus = pgTable(
  'worker_gpus',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    worker_id: text()
      .notNull()
      .references(() => workers.id, { onDelete: 'cascade' }),
    vendor: text(),
    name: text(),
    vram_gb: doublePrecision(),
    driver: text(),
    cuda: text(),
    // nvidia-smi's index (docs/api.md §7 registration gpus[].index, ext); null when not reported.
    gpu_index: integer(),
  },
  (t) => [index('worker_gpus_worker').on(t.worker_id)],
)

// docs/api.md §7 pull_models: at most one worker at a time is asked to materialise an entry. The row
// lives while the ask is outstanding; it lapses when the worker reports the download finished or
// failed, goes offline, re-registers, or stays silent about it for HEARTBEAT_TIMEOUT_SECONDS.
export const modelPulls = pgTable('model_pulls', {
  catalog_id: text()
    .primaryKey()
    .references(() => catalogEntries.id, { onDelete: 'cascade', onUpdate: 'cascade' }),
  worker_id: text()
    .notNull()
    .references(() => workers.id, { onDelete: 'cascade' }),
  runtime: text().notNull(),
  runtime_model_id: text().notNull(),
  asked_at: bigint({ mode: 'number' }).notNull(),
  last_progress_at: bigint({ mode: 'number' }).notNull(),
  // docs/api.md §7 model-progress: the last reported step and bytes (null until the first report).
  progress_status: text({ enum: ['downloading', 'verifying'] }),
  completed_bytes: bigint({ mode: 'number' }),
  total_bytes: bigint({ mode: 'number' }),
})

// docs/api.md §7 model-progress `failed`: the back-off of one worker for one entry after its
// download failed (src/domain/downloads.ts backOffDownload): not asked again before retry_at unless
// the catalogue changed what the entry downloads (`pin`); `failures` in a row, reset by a success.
export const modelPullFailures = pgTable(
  'model_pull_failures',
  {
    catalog_id: text()
      .notNull()
      .references(() => catalogEntries.id, { onDelete: 'cascade', onUpdate: 'cascade' }),
    worker_id: text()
      .notNull()
      .references(() => workers.id, { onDelete: 'cascade' }),
    // The ask that failed: the profile it was made through (the worker row shows the name).
    runtime: text().notNull(),
    runtime_model_id: text().notNull(),
    pin: text().notNull(),
    failures: integer().notNull(),
    error: text().notNull(),
    failed_at: bigint({ mode: 'number' }).notNull(),
    retry_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.catalog_id, t.worker_id] })],
)
