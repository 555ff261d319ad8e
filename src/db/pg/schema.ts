import { sql } from 'drizzle-orm'
import {
  bigint,
  bigserial,
  boolean,
  customType,
  doublePrecision,
  index,
  integer,
  pgTable,
  primaryKey,
  text,
  unique,
  uniqueIndex,
} from 'drizzle-orm/pg-core'
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../schema/webhooks'
import { jsonb } from './jsonb'

// The PostgreSQL twin of src/db/schema (docs/api.md §12): the same tables, columns and indexes, in
// PostgreSQL's types (bigint seconds, boolean, jsonb, double precision). Row types come from the
// SQLite schema; a test checks that both schemas name the same columns.

// Accounts: users, organizations, memberships, API keys and reset tokens (docs/api.md §3, docs/api.md §1–3).
// Every table carries an integer `seq` (rowid alias) beside its public random `id`: lists are
// newest-first by `seq`, a stable order that random ids cannot give and VACUUM does not renumber.

export const users = pgTable('users', {
  seq: bigserial({ mode: 'number' }).primaryKey(),
  id: text().notNull().unique(),
  email: text().notNull().unique(),
  password_hash: text().notNull(),
  full_name: text().notNull(),
  platform_role: text({ enum: ['user', 'superadmin'] })
    .notNull()
    .default('user'),
  is_active: boolean().notNull().default(true),
  must_change_password: boolean().notNull().default(false),
  // Bumped by a password change or reset: JWTs carrying an older `tv` stop working.
  token_version: integer().notNull().default(0),
  created_at: bigint({ mode: 'number' }).notNull(),
  updated_at: bigint({ mode: 'number' }).notNull(),
})

export const organizations = pgTable('organizations', {
  seq: bigserial({ mode: 'number' }).primaryKey(),
  id: text().notNull().unique(),
  name: text().notNull(),
  personal: boolean().notNull().default(false),
  created_at: bigint({ mode: 'number' }).notNull(),
})

export const memberships = pgTable(
  'memberships',
  {
    org_id: text()
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    role: text({ enum: ['owner', 'admin', 'viewer'] }).notNull(),
    created_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.org_id, t.user_id] }), index('memberships_user').on(t.user_id)],
)

export const apiKeys = pgTable(
  'api_keys',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    key_type: text({ enum: ['personal', 'worker'] }).notNull(),
    name: text().notNull(),
    // First 12 characters of the raw key: all a listing ever shows.
    prefix: text().notNull(),
    // SHA-256 of the raw key, hex. The raw key is never stored.
    key_hash: text().notNull().unique(),
    org_id: text().references(() => organizations.id, { onDelete: 'cascade' }),
    user_id: text().references(() => users.id, { onDelete: 'cascade' }),
    created_by: text(),
    created_at: bigint({ mode: 'number' }).notNull(),
    expires_at: bigint({ mode: 'number' }),
    last_used_at: bigint({ mode: 'number' }),
    revoked_at: bigint({ mode: 'number' }),
  },
  (t) => [index('api_keys_user').on(t.user_id), index('api_keys_org').on(t.org_id)],
)

export const passwordResetTokens = pgTable(
  'password_reset_tokens',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // SHA-256 of the mailed token; the raw token exists only in the mail.
    token_hash: text().notNull().unique(),
    created_at: bigint({ mode: 'number' }).notNull(),
    expires_at: bigint({ mode: 'number' }).notNull(),
    used_at: bigint({ mode: 'number' }),
  },
  (t) => [index('password_reset_tokens_user').on(t.user_id)],
)

// Files, batches, their stored validation errors and assignments (docs/api.md §7 and §6, docs/api.md §5–6).

export const files = pgTable(
  'files',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // The client's filename is metadata only; bytes live at DATA_DIR/files/<id>.
    filename: text().notNull(),
    purpose: text({ enum: ['batch', 'batch_output'] }).notNull(),
    bytes: bigint({ mode: 'number' }).notNull(),
    batch_id: text(), // set on output and error files
    created_at: bigint({ mode: 'number' }).notNull(),
    // docs/api.md §15: when the retention pass deletes it (expires_after on upload, FILE_RETENTION_DAYS
    // for outputs); null = kept until deleted.
    expires_at: bigint({ mode: 'number' }),
  },
  (t) => [
    index('files_user').on(t.user_id, t.purpose),
    // The retention pass: the files due by now are one range probe.
    index('files_expires').on(t.expires_at),
  ],
)

export const batches = pgTable(
  'batches',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // No foreign key: the batch keeps naming its input after the file is deleted.
    input_file_id: text().notNull(),
    endpoint: text().notNull(),
    completion_window: text().notNull(),
    // body.model as submitted (set by validation). A renamed catalogue id keeps the old slug here.
    model: text(),
    status: text({ enum: ['validating', 'validated', 'in_progress', 'completed', 'failed'] }).notNull(),
    attempts: integer().notNull().default(0),
    error: text(), // last failure text, at most 2000 characters
    errors_total: integer().notNull().default(0), // true count of validation errors (≤100 stored)
    request_counts_total: integer().notNull().default(0),
    request_counts_completed: integer().notNull().default(0),
    request_counts_failed: integer().notNull().default(0),
    output_file_id: text(),
    error_file_id: text(),
    // The personal key that created the batch (null: created with a JWT, i.e. from the dashboard).
    // No foreign key: usage by key (docs/api.md §14) keeps naming a key whatever becomes of it.
    api_key_id: text(),
    metadata: jsonb().$type<Record<string, string>>(),
    usage: jsonb().$type<Record<string, number>>(),
    created_at: bigint({ mode: 'number' }).notNull(),
    in_progress_at: bigint({ mode: 'number' }),
    completed_at: bigint({ mode: 'number' }),
    failed_at: bigint({ mode: 'number' }),
    updated_at: bigint({ mode: 'number' }).notNull(),
    // PostgreSQL only (several instances): the instance validating this batch, until when.
    validation_holder: text(),
    validation_lease_until: bigint({ mode: 'number' }),
    // docs/api.md §16: the batch runs as shards (batch_shards); next_request is the first request line
    // not yet cut into a shard (guided self-scheduling cuts the rest claim by claim).
    split: boolean().notNull().default(false),
    next_request: integer().notNull().default(0),
  },
  (t) => [
    index('batches_user').on(t.user_id, t.seq),
    // docs/api.md §16: split batches still handing out shards are found per model without the queue.
    index('batches_split_model').on(t.model, t.seq).where(sql`split AND status = 'in_progress'`),
    // Poll (docs/api.md §7, §14 fair share): the owners waiting for one model are a skip scan, and
    // each owner's oldest validated batch of it one probe; how many batches each owner has in
    // progress is one range of batches_status_user.
    index('batches_status_model').on(t.status, t.model, t.user_id, t.seq),
    index('batches_status_user').on(t.status, t.user_id),
    index('batches_completed').on(t.completed_at),
    index('batches_user_completed').on(t.user_id, t.completed_at),
  ],
)

export const batchErrors = pgTable(
  'batch_errors',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    batch_id: text()
      .notNull()
      .references(() => batches.id, { onDelete: 'cascade' }),
    code: text().notNull(),
    line: integer(),
    field: text(),
    message: text().notNull(),
  },
  (t) => [index('batch_errors_batch').on(t.batch_id)],
)

// docs/api.md §7: links a batch to the worker holding it; deleted on requeue; survives removal of the
// worker as history (so worker_id carries no foreign key). UNIQUE(batch_id) makes a double claim
// impossible at the storage level, whatever the code above it does.
export const batchAssignments = pgTable(
  'batch_assignments',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    batch_id: text()
      .notNull()
      .unique()
      .references(() => batches.id, { onDelete: 'cascade' }),
    worker_id: text().notNull(),
    org_id: text().notNull(),
    assigned_at: bigint({ mode: 'number' }).notNull(),
    completed_at: bigint({ mode: 'number' }),
    /**
     * docs/api.md §7 max_concurrent_jobs on PostgreSQL: which of its worker's slots 0 …
     * max_concurrent_jobs − 1 this open assignment holds (src/store/postgres/queue.ts claimOne).
     * Null on SQLite, whose claims take turns.
     */
    slot: integer(),
  },
  // (worker_id, completed_at): a worker's current assignments are one range probe, however
  // much completed history it has (poll's max_concurrent_jobs, heartbeat's assigned_job_ids).
  // (org_id, completed_at): GET /v1/orgs/{org_id}/usage, the work an org's workers finished
  // within a range, is one range probe.
  // (worker_id, slot) of the open assignments: two claims never hold one slot of a worker. Only
  // slotted rows are in it, so SQLite's claims (slot null) write no entry.
  (t) => [
    index('batch_assignments_worker').on(t.worker_id, t.completed_at),
    index('batch_assignments_org').on(t.org_id, t.completed_at),
    uniqueIndex('batch_assignments_slot')
      .on(t.worker_id, t.slot)
      .where(sql`slot IS NOT NULL AND completed_at IS NULL`),
  ],
)

// docs/api.md §16: a shard is a contiguous run of a split batch's request lines with its own lease
// (worker, assignment), attempts and results. The batch's counts are the sum over its shards.
export const batchShards = pgTable(
  'batch_shards',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    batch_id: text()
      .notNull()
      .references(() => batches.id, { onDelete: 'cascade' }),
    user_id: text().notNull(),
    shard_index: integer().notNull(),
    first_request: integer().notNull(),
    requests: integer().notNull(),
    status: text({ enum: ['waiting', 'running', 'done'] }).notNull(),
    attempts: integer().notNull().default(0),
    worker_id: text(),
    org_id: text(),
    assignment_id: text(),
    assigned_at: bigint({ mode: 'number' }),
    completed_at: bigint({ mode: 'number' }),
    request_counts_completed: integer().notNull().default(0),
    request_counts_failed: integer().notNull().default(0),
    usage: jsonb().$type<Record<string, number>>(),
    output_key: text(),
    error_key: text(),
    updated_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [
    uniqueIndex('batch_shards_batch').on(t.batch_id, t.shard_index),
    index('batch_shards_worker').on(t.worker_id, t.status),
    index('batch_shards_user').on(t.user_id, t.status),
    // GET /v1/orgs/{org_id}/usage: the shards an org's workers completed within a range.
    index('batch_shards_org').on(t.org_id, t.completed_at),
    index('batch_shards_status').on(t.status),
  ],
)

const bytea = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'bytea' })

// docs/api.md §16: where each request line of a validated batch starts in its input file (see the
// SQLite schema).
export const batchLineIndex = pgTable('batch_line_index', {
  batch_id: text()
    .primaryKey()
    .references(() => batches.id, { onDelete: 'cascade' }),
  offsets: bytea().notNull(),
})

// The model catalogue (docs/api.md §4 "Catalogue entry", docs/api.md §4). Curated from a manifest; worker
// reports feed availability only, never identity (docs/api.md §4 catalogue rule 6). Child rows follow a one-shot
// rename through ON UPDATE CASCADE (docs/api.md §4 catalogue rule 5: the row and its child rows are updated in place).

export const catalogEntries = pgTable(
  'catalog_entries',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    display_name: text().notNull(),
    runtime: text(), // deprecated in favour of serving profiles; still written
    runtime_model_id: text(), // deprecated in favour of serving profiles; still written
    digest: text(), // 64 lowercase hex, or null (then matched by name)
    quantization: text(),
    parameter_size: text(),
    context_length: integer(),
    vram_gb: doublePrecision(), // null disables the VRAM filter
    size_gb: doublePrecision(),
    // null only for staged discovery stubs (enabled = false) awaiting review (docs/api.md §4 catalogue rule 8).
    task_type: text({ enum: ['chat', 'text-generation', 'embedding', 'vision'] }),
    capabilities: jsonb().$type<Record<string, boolean>>().notNull().default({}),
    lineage: text(),
    source_type: text(),
    source_ref: text(),
    source_revision: text(),
    homepage_url: text(),
    org_id: text(), // null = public; set = private to that org (reserved, docs/api.md §4 catalogue rule 10)
    status: text({ enum: ['active', 'requested', 'deprecated', 'unverified'] })
      .notNull()
      .default('active'),
    enabled: boolean().notNull().default(true),
    renamed_from: text(),
    created_at: bigint({ mode: 'number' }).notNull(),
    updated_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [index('catalog_entries_renamed_from').on(t.renamed_from)],
)

export const servingProfiles = pgTable(
  'serving_profiles',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    catalog_id: text()
      .notNull()
      .references(() => catalogEntries.id, { onDelete: 'cascade', onUpdate: 'cascade' }),
    runtime: text().notNull(),
    runtime_model_id: text().notNull(),
    // Platform-owned server-launch settings; per-request sampling stays in each line's body.
    params: jsonb().$type<Record<string, unknown>>().notNull().default({}),
    // true when derived from the entry's runtime/runtime_model_id (no explicit profiles given).
    derived: boolean().notNull().default(false),
  },
  (t) => [unique('serving_profiles_entry_runtime').on(t.catalog_id, t.runtime)],
)

export const artifactFiles = pgTable(
  'artifact_files',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    catalog_id: text()
      .notNull()
      .references(() => catalogEntries.id, { onDelete: 'cascade', onUpdate: 'cascade' }),
    path: text().notNull(),
    sha256: text().notNull(),
    size_bytes: bigint({ mode: 'number' }),
  },
  (t) => [unique('artifact_files_entry_path').on(t.catalog_id, t.path)],
)

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
    current_job_id: text(),
    uptime_seconds: integer(),
    max_concurrent_jobs: integer().notNull().default(1),
    max_download_gb: doublePrecision().notNull().default(0),
    // docs/api.md §16: registered with capabilities.shards (handed shards of split batches).
    shards: boolean().notNull().default(false),
    // The requests the daemon keeps in flight now, as its last heartbeat reported (null: never).
    concurrency: integer(),
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
})

// PostgreSQL only: maintenance passes run once per interval across every instance sharing the
// database (docs/api.md §12; pg-boss `trySetTimestamp`). SQLite has one process and needs no row.
export const maintenanceRuns = pgTable('maintenance_runs', {
  name: text().primaryKey(),
  last_run_at: bigint({ mode: 'number' }).notNull(),
})

// PostgreSQL only: rate-limit hits shared by every instance (docs/api.md §12); SQLite's one process
// keeps them in memory (src/lib/rate-limit.ts).
export const rateLimitHits = pgTable(
  'rate_limit_hits',
  {
    rule: text().notNull(),
    key: text().notNull(),
    at: bigint({ mode: 'number' }).notNull(), // ms
  },
  (t) => [index('rate_limit_hits_key').on(t.rule, t.key, t.at), index('rate_limit_hits_at').on(t.rule, t.at)],
)

// Webhooks (docs/api.md §13): endpoints, the outbox, the attempt log (see src/db/schema/webhooks.ts).
export const webhooks = pgTable(
  'webhooks',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    url: text().notNull(),
    secret: text().notNull(),
    events: jsonb().notNull().$type<WebhookEventType[]>(),
    created_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [index('webhooks_user').on(t.user_id, t.seq)],
)

export const webhookMessages = pgTable(
  'webhook_messages',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    webhook_id: text()
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    batch_id: text().notNull(),
    type: text({ enum: WEBHOOK_EVENT_TYPES }).notNull(),
    created_at: bigint({ mode: 'number' }).notNull(),
    status: text({ enum: ['pending', 'delivered', 'gave_up'] }).notNull(),
    attempts: integer().notNull().default(0),
    next_attempt_at: bigint({ mode: 'number' }),
    lease: text(),
  },
  (t) => [index('webhook_messages_due').on(t.status, t.next_attempt_at)],
)

export const webhookAttempts = pgTable(
  'webhook_attempts',
  {
    seq: bigserial({ mode: 'number' }).primaryKey(),
    id: text().notNull().unique(),
    webhook_id: text()
      .notNull()
      .references(() => webhooks.id, { onDelete: 'cascade' }),
    message_id: text().notNull(),
    batch_id: text().notNull(),
    type: text({ enum: WEBHOOK_EVENT_TYPES }).notNull(),
    attempted_at: bigint({ mode: 'number' }).notNull(),
    outcome: text({ enum: ['delivered', 'failed', 'refused'] }).notNull(),
    status_code: integer(),
    error: text(),
    duration_ms: integer().notNull(),
  },
  (t) => [index('webhook_attempts_webhook').on(t.webhook_id, t.seq)],
)
