import { and, asc, eq, gt, inArray, or, sql } from 'drizzle-orm'
import type { Db } from '../../db/open'
import { preparedOnce } from '../../db/prepared'
import { type BatchRow, batchErrors, batches, batchLineIndex, files } from '../../db/schema'
import { writeTx } from '../../db/tx'
import { NON_TERMINAL_STATUSES } from '../../domain/batch-states'
import type { Tally } from '../../domain/waiting'
import { type BatchesStore, lineIndexRow, newBatchRow, sumQueueTallies, validationMove } from '../batches'
import { batchTimesColumns, listedBatches } from '../statements'
import type { SqliteDeps } from './deps'
import { pageRows } from './page'
import { transition } from './transition'

const stmts = preparedOnce((db: Db) => ({
  byId: db
    .select()
    .from(batches)
    .where(eq(batches.id, sql.placeholder('id')))
    .prepare(),
  active: db
    .select({ status: batches.status, n: sql<number>`count(*)` })
    .from(batches)
    .where(inArray(batches.status, [...NON_TERMINAL_STATUSES]))
    .groupBy(batches.status)
    .prepare(),
  // What is active now (batches_status_model), plus what finished since (batches_completed; a
  // failed batch has completed_at stamped too).
  recent: db
    .select({
      ...batchTimesColumns(batches),
      done: sql<number>`${batches.request_counts_completed} + ${batches.request_counts_failed}`,
    })
    .from(batches)
    .where(
      or(
        inArray(batches.status, [...NON_TERMINAL_STATUSES]),
        gt(batches.completed_at, sql.placeholder('since')),
      ),
    )
    .prepare(),
  // POST /v1/batches: the input file, if it is the caller's.
  ownFile: db
    .select({ purpose: files.purpose, expires_at: files.expires_at })
    .from(files)
    .where(and(eq(files.id, sql.placeholder('id')), eq(files.user_id, sql.placeholder('user'))))
    .prepare(),
  // docs/api.md §6 `waiting` (queued): index-only on batches_validated_model, the batches ahead only.
  ahead: db.$client.prepare<Tally, { model: string; seq: number }>(
    `SELECT count(*) AS batches,
       coalesce(sum(request_counts_total - request_counts_completed - request_counts_failed), 0) AS requests
     FROM batches INDEXED BY batches_validated_model
     WHERE status = 'validated' AND model = $model AND seq < $seq`,
  ),
  // One range of batches_status_model: a model's batches in progress.
  running: db.$client.prepare<Tally, { model: string }>(
    `SELECT count(*) AS batches,
       coalesce(sum(request_counts_total - request_counts_completed - request_counts_failed), 0) AS requests
     FROM batches WHERE status = 'in_progress' AND model = $model`,
  ),
  validating: db
    .select({ id: batches.id })
    .from(batches)
    .where(eq(batches.status, 'validating'))
    .orderBy(asc(batches.seq))
    .prepare(),
}))

export function sqliteBatches(deps: SqliteDeps): BatchesStore {
  const { db } = deps
  return {
    async create(b, check) {
      return writeTx(db, (tx) => {
        check(stmts(deps).ownFile.get({ id: b.input_file_id, user: b.user_id }))
        return tx.insert(batches).values(newBatchRow(b)).returning().get()
      })
    },

    async get(batchId, ownerId) {
      const row = stmts(deps).byId.get({ id: batchId })
      return row && (ownerId === null || row.user_id === ownerId) ? row : null
    },

    async page(filter, query) {
      return pageRows<BatchRow>(db, batches, listedBatches(batches, filter), query)
    },

    async errorsOf(batchIds) {
      if (batchIds.length === 0) return new Map()
      const rows = db
        .select()
        .from(batchErrors)
        .where(inArray(batchErrors.batch_id, batchIds))
        .orderBy(asc(batchErrors.seq))
        .all()
      return Map.groupBy(rows, (r) => r.batch_id)
    },

    async validatingIds() {
      return stmts(deps)
        .validating.all()
        .map((r) => r.id)
    },

    async queueTallies(places) {
      const s = stmts(deps)
      const running = new Map<string, Tally>()
      for (const model of new Set(places.flatMap((p) => p.models)))
        running.set(model, s.running.get({ model })!)
      const ahead = places.flatMap((p) =>
        p.models.map((model) => ({ batchId: p.batchId, ...s.ahead.get({ model, seq: p.seq })! })),
      )
      return sumQueueTallies(places, ahead, running)
    },

    async activeCounts() {
      return Object.fromEntries(
        stmts(deps)
          .active.all()
          .map((r) => [r.status, r.n]),
      )
    },

    async timesSince(since) {
      return stmts(deps).recent.all({ since })
    },

    // One process validates (the instance lock): the validator's own in-flight set is the lease.
    async leaseValidations(batchIds) {
      const rows: BatchRow[] = []
      for (const id of batchIds) {
        const row = stmts(deps).byId.get({ id })
        if (row?.status === 'validating') rows.push(row)
      }
      return rows
    },

    async finishValidations(items, now) {
      return writeTx(db, (tx) =>
        items.map(({ batchId, result }) => {
          const { event, changes } = validationMove(result, now)
          const row = transition(deps, batchId, event, now, changes)
          // docs/api.md §6: at most MAX_STORED_ERRORS stored; a stale run (row null) writes nothing.
          if (row && result.errors.length > 0) {
            tx.insert(batchErrors)
              .values(result.errors.map((e) => ({ batch_id: batchId, ...e })))
              .run()
          }
          const index = row && lineIndexRow(batchId, result)
          if (index) tx.insert(batchLineIndex).values(index).run()
          return row
        }),
      )
    },
  }
}
