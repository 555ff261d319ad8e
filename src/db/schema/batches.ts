import { sql } from 'drizzle-orm'
import { blob, index, integer, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core'
import { users } from './accounts'

// Files, batches, their stored validation errors and assignments (docs/api.md §7 and §6, docs/api.md §5–6).

export const files = sqliteTable(
  'files',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(),
    user_id: text()
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    // The client's filename is metadata only; bytes live at DATA_DIR/files/<id>.
    filename: text().notNull(),
    purpose: text({ enum: ['batch', 'batch_output'] }).notNull(),
    bytes: integer().notNull(),
    batch_id: text(), // set on output and error files
    created_at: integer().notNull(),
    // docs/api.md §15: when the retention pass deletes it (expires_after on upload, FILE_RETENTION_DAYS
    // for outputs); null = kept until deleted.
    expires_at: integer(),
  },
  (t) => [
    index('files_user').on(t.user_id, t.purpose),
    // The retention pass: the files due by now are one range probe.
    index('files_expires').on(t.expires_at),
  ],
)

export const batches = sqliteTable(
  'batches',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
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
    metadata: text({ mode: 'json' }).$type<Record<string, string>>(),
    usage: text({ mode: 'json' }).$type<Record<string, number>>(),
    created_at: integer().notNull(),
    in_progress_at: integer(),
    completed_at: integer(),
    failed_at: integer(),
    updated_at: integer().notNull(),
    // docs/api.md §16: the batch runs as shards (batch_shards); next_request counts the request lines
    // cut into shards so far (guided self-scheduling cuts the rest claim by claim).
    split: integer({ mode: 'boolean' }).notNull().default(false),
    next_request: integer().notNull().default(0),
    // docs/api.md §6 "Execution order": validation found an order other than the file's (stored as
    // batch_line_index.spans); its shards follow its prefix groups.
    ordered: integer({ mode: 'boolean' }).notNull().default(false),
    // docs/api.md §7 placement: when the batch last became `validated` (validation, or a requeue);
    // how long it has waited is now − queued_at. Null for a batch that waited before this column.
    queued_at: integer(),
  },
  (t) => [
    index('batches_user').on(t.user_id, t.seq),
    // docs/api.md §16: split batches still handing out shards are found per model without the queue.
    index('batches_split_model').on(t.model, t.seq).where(sql`split = 1 AND status = 'in_progress'`),
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
    // GET /v1/stats/queue: the batches finished within the last hour are one range probe.
    index('batches_completed').on(t.completed_at),
    // GET /v1/usage: one user's batches finished within a range are one range probe.
    index('batches_user_completed').on(t.user_id, t.completed_at),
  ],
)

export const batchErrors = sqliteTable(
  'batch_errors',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
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
export const batchAssignments = sqliteTable(
  'batch_assignments',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(),
    batch_id: text()
      .notNull()
      .unique()
      .references(() => batches.id, { onDelete: 'cascade' }),
    worker_id: text().notNull(),
    org_id: text().notNull(),
    assigned_at: integer().notNull(),
    completed_at: integer(),
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
export const batchShards = sqliteTable(
  'batch_shards',
  {
    seq: integer().primaryKey({ autoIncrement: true }),
    id: text().notNull().unique(),
    batch_id: text()
      .notNull()
      .references(() => batches.id, { onDelete: 'cascade' }),
    // The batch's owner: fair share (docs/api.md §14) counts an owner's held shards.
    user_id: text().notNull(),
    shard_index: integer().notNull(),
    first_request: integer().notNull(),
    requests: integer().notNull(),
    status: text({ enum: ['waiting', 'running', 'done'] }).notNull(),
    attempts: integer().notNull().default(0),
    // The current lease; null while waiting. Kept when done, as history.
    worker_id: text(),
    org_id: text(),
    assignment_id: text(),
    assigned_at: integer(),
    completed_at: integer(),
    request_counts_completed: integer().notNull().default(0),
    request_counts_failed: integer().notNull().default(0),
    usage: text({ mode: 'json' }).$type<Record<string, number>>(),
    // Blob keys of the shard's output and error parts, joined into the batch's files at the end.
    output_key: text(),
    error_key: text(),
    // docs/api.md §16 backup copies: while the shard runs, a second copy of it on another worker with
    // its own lease and live counts; once the shard is done, the copy that lost (the lease above is
    // then the copy whose output the shard kept, and backup_won says whether that was the backup).
    backup_worker_id: text(),
    backup_org_id: text(),
    backup_assignment_id: text(),
    backup_assigned_at: integer(),
    backup_request_counts_completed: integer().notNull().default(0),
    backup_request_counts_failed: integer().notNull().default(0),
    backup_won: integer({ mode: 'boolean' }).notNull().default(false),
    updated_at: integer().notNull(),
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

// docs/api.md §16: where each request line of a validated batch starts in its input file, written by
// validation (little-endian float64s, one per request line), so a shard's bytes are one range read
// however large the file. docs/api.md §6 "Execution order": `spans` is the batch's request lines in
// execution order (12 bytes each: the line's start, a little-endian float64, and its length in bytes
// up to the next request line, its terminator included, a little-endian uint32), so a shard's lines
// are one read of the index; null when the execution order is the file order. With `spans`,
// `offsets` is empty: nothing reads it then.
export const batchLineIndex = sqliteTable('batch_line_index', {
  batch_id: text()
    .primaryKey()
    .references(() => batches.id, { onDelete: 'cascade' }),
  offsets: blob({ mode: 'buffer' }).notNull(),
  spans: blob({ mode: 'buffer' }),
})

// docs/api.md §16: the join of a split batch's shards, held by one joiner at a time under a lease both
// engines fence with, and the blobs nothing else refers to while it runs: the files it writes (until
// they are the batch's), then the shards' parts it removes. The row goes once those are removed; a
// joiner that died leaves it lapsing, and whoever takes it next removes what it lists first.
export const batchJoins = sqliteTable('batch_joins', {
  // No foreign key: blobs a join left are removed even after its batch is gone.
  batch_id: text().primaryKey(),
  joiner: text().notNull(),
  lease_until: integer().notNull(),
  blobs: text({ mode: 'json' }).$type<string[]>().notNull(),
})

export type FileRow = typeof files.$inferSelect
export type BatchRow = typeof batches.$inferSelect
export type BatchStatus = BatchRow['status']
export type BatchAssignmentRow = typeof batchAssignments.$inferSelect
export type BatchErrorRow = typeof batchErrors.$inferSelect
export type BatchShardRow = typeof batchShards.$inferSelect
export type BatchJoinRow = typeof batchJoins.$inferSelect
