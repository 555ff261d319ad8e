import { sql } from 'drizzle-orm'
import {
  bigint,
  bigserial,
  boolean,
  customType,
  index,
  integer,
  pgTable,
  text,
  uniqueIndex,
} from 'drizzle-orm/pg-core'
import { jsonb } from '../jsonb'
import { users } from './accounts'

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
    // docs/api.md §6: the capabilities the batch needs of a worker's engine, set by validation: their
    // names in a fixed order joined by commas, '' for none (src/domain/capabilities.ts needsKey).
    needs: text().notNull().default(''),
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
    // docs/api.md §16: the batch runs as shards (batch_shards); next_request counts the request lines
    // cut into shards so far (guided self-scheduling cuts the rest claim by claim).
    split: boolean().notNull().default(false),
    next_request: integer().notNull().default(0),
    // docs/api.md §6 "Execution order": validation found an order other than the file's (stored as
    // batch_line_index.spans); its shards follow its prefix groups.
    ordered: boolean().notNull().default(false),
    // docs/api.md §7 placement: when the batch last became `validated` (validation, or a requeue);
    // how long it has waited is now − queued_at. Null for a batch that waited before this column.
    queued_at: bigint({ mode: 'number' }),
  },
  (t) => [
    index('batches_user').on(t.user_id, t.seq),
    // docs/api.md §16: split batches still handing out shards are found per model without the queue.
    index('batches_split_model').on(t.model, t.seq).where(sql`split AND status = 'in_progress'`),
    // Poll (docs/api.md §7, §14 fair share): the owners waiting for one model with needs the worker
    // can meet (Poll rule 7) are a skip scan, and each owner's oldest validated batch of it one
    // probe; how many batches each owner has in progress is one range of batches_status_user.
    index('batches_status_model').on(t.status, t.model, t.needs, t.user_id, t.seq),
    index('batches_status_user').on(t.status, t.user_id),
    // docs/api.md §6 `waiting` (queued): the validated batches of a model before one batch, and their
    // requests not yet done, are one index-only range, however long the rest of the queue.
    index('batches_validated_model')
      .on(t.model, t.seq, t.request_counts_total, t.request_counts_completed, t.request_counts_failed)
      .where(sql`status = 'validated'`),
    // docs/api.md §7 placement: each model's longest-waiting batch is one probe (only batches with a
    // queued_at: no other read of the validated batches finds this index fitter than its own).
    index('batches_waiting')
      .on(t.model, t.queued_at)
      .where(sql`status = 'validated' AND queued_at IS NOT NULL`),
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
  // (worker_id) of the open assignments without a slot (older, or copied from SQLite): the claim
  // counts them with one probe of an index that is all but empty, not a walk over every open
  // assignment of the worker (src/store/postgres/queue.ts claimOne).
  (t) => [
    index('batch_assignments_worker').on(t.worker_id, t.completed_at),
    index('batch_assignments_org').on(t.org_id, t.completed_at),
    uniqueIndex('batch_assignments_slot')
      .on(t.worker_id, t.slot)
      .where(sql`slot IS NOT NULL AND completed_at IS NULL`),
    index('batch_assignments_slotless').on(t.worker_id).where(sql`slot IS NULL AND completed_at IS NULL`),
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
    // docs/api.md §16 backup copies: while the shard runs, a second copy of it on another worker with
    // its own lease and live counts; once the shard is done, the copy that lost (the lease above is
    // then the copy whose output the shard kept, and backup_won says whether that was the backup).
    backup_worker_id: text(),
    backup_org_id: text(),
    backup_assignment_id: text(),
    backup_assigned_at: bigint({ mode: 'number' }),
    backup_request_counts_completed: integer().notNull().default(0),
    backup_request_counts_failed: integer().notNull().default(0),
    backup_won: boolean().notNull().default(false),
    updated_at: bigint({ mode: 'number' }).notNull(),
  },
  (t) => [
    uniqueIndex('batch_shards_batch').on(t.batch_id, t.shard_index),
    index('batch_shards_worker').on(t.worker_id, t.status),
    index('batch_shards_user').on(t.user_id, t.status),
    // A worker's backup copies: max_concurrent_jobs and the heartbeat's assigned_job_ids count them.
    index('batch_shards_backup').on(t.backup_worker_id, t.status),
    // GET /v1/orgs/{org_id}/usage: the shards an org's workers completed within a range.
    index('batch_shards_org').on(t.org_id, t.completed_at),
    index('batch_shards_status').on(t.status),
  ],
)

const bytea = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'bytea' })

// docs/api.md §16: where each request line of a validated batch starts in its input file, and
// (docs/api.md §6 "Execution order") its request lines in execution order (see the SQLite schema).
export const batchLineIndex = pgTable('batch_line_index', {
  batch_id: text()
    .primaryKey()
    .references(() => batches.id, { onDelete: 'cascade' }),
  offsets: bytea().notNull(),
  spans: bytea(),
})

// docs/api.md §16: the join of a split batch's shards under its lease, and the blobs it may leave (see
// the SQLite schema).
export const batchJoins = pgTable('batch_joins', {
  batch_id: text().primaryKey(),
  joiner: text().notNull(),
  lease_until: bigint({ mode: 'number' }).notNull(),
  blobs: jsonb().$type<string[]>().notNull(),
})
