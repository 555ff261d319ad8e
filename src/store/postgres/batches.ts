import { and, asc, eq, gt, inArray, isNull, lt, or, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { BatchErrorRow, BatchRow } from '../../db/schema'
import { NON_TERMINAL_STATUSES } from '../../modules/batches/states'
import type { BatchesStore } from '../batches'
import type { PgDb } from './db'
import { pageRows } from './page'
import { transitionEach } from './queue'

const { batches, batchErrors, files } = schema

export function postgresBatches(db: PgDb): BatchesStore {
  return {
    async create(b, check) {
      return db.transaction(async (tx) => {
        // Locked: a DELETE /v1/files on another instance waits for this batch to exist.
        const [file] = await tx
          .select({ purpose: files.purpose, expires_at: files.expires_at })
          .from(files)
          .where(and(eq(files.id, b.input_file_id), eq(files.user_id, b.user_id)))
          .for('share')
        check(file)
        const [row] = await tx
          .insert(batches)
          .values({
            id: b.id,
            user_id: b.user_id,
            api_key_id: b.api_key_id,
            input_file_id: b.input_file_id,
            endpoint: b.endpoint,
            completion_window: b.completion_window,
            status: 'validating',
            metadata: b.metadata,
            created_at: b.now,
            updated_at: b.now,
          })
          .returning()
        return row as BatchRow
      })
    },

    async get(batchId, ownerId) {
      const [row] = await db
        .select()
        .from(batches)
        .where(and(eq(batches.id, batchId), ownerId === null ? undefined : eq(batches.user_id, ownerId)))
      return (row as BatchRow | undefined) ?? null
    },

    async page(filter, query) {
      const where = and(
        filter.ownerId === null ? undefined : eq(batches.user_id, filter.ownerId),
        filter.status ? eq(batches.status, filter.status) : undefined,
      )
      return pageRows<BatchRow>(db, batches, where, query)
    },

    async errorsOf(batchIds) {
      const byBatch = new Map<string, BatchErrorRow[]>()
      if (batchIds.length === 0) return byBatch
      const rows = await db
        .select()
        .from(batchErrors)
        .where(inArray(batchErrors.batch_id, batchIds))
        .orderBy(asc(batchErrors.seq))
      for (const r of rows) {
        const list = byBatch.get(r.batch_id)
        if (list) list.push(r)
        else byBatch.set(r.batch_id, [r])
      }
      return byBatch
    },

    async validatingIds() {
      const rows = await db
        .select({ id: batches.id })
        .from(batches)
        .where(eq(batches.status, 'validating'))
        .orderBy(asc(batches.seq))
      return rows.map((r) => r.id)
    },

    async activeCounts() {
      const rows = await db
        .select({ status: batches.status, n: sql<number>`count(*)::int` })
        .from(batches)
        .where(inArray(batches.status, [...NON_TERMINAL_STATUSES]))
        .groupBy(batches.status)
      return Object.fromEntries(rows.map((r) => [r.status, r.n]))
    },

    async timesSince(since) {
      return db
        .select({
          status: batches.status,
          created_at: batches.created_at,
          in_progress_at: batches.in_progress_at,
          completed_at: batches.completed_at,
          failed_at: batches.failed_at,
          done: sql<number>`(${batches.request_counts_completed} + ${batches.request_counts_failed})::int`,
        })
        .from(batches)
        .where(or(inArray(batches.status, [...NON_TERMINAL_STATUSES]), gt(batches.completed_at, since)))
    },

    async leaseValidations(batchIds, holder, now, until) {
      if (batchIds.length === 0) return []
      const rows = await db
        .update(batches)
        .set({ validation_holder: holder, validation_lease_until: until })
        .where(
          and(
            inArray(batches.id, batchIds),
            eq(batches.status, 'validating'),
            or(
              isNull(batches.validation_lease_until),
              lt(batches.validation_lease_until, now),
              eq(batches.validation_holder, holder),
            ),
          ),
        )
        .returning()
      return rows as BatchRow[]
    },

    async finishValidations(items, now) {
      return db.transaction(async (tx) => {
        const moves = items.map(({ batchId, result }) => ({
          batchId,
          ...(result.passed
            ? {
                event: 'validation_passed' as const,
                changes: { model: result.model, request_counts_total: result.request_lines, errors_total: 0 },
              }
            : {
                event: 'validation_failed' as const,
                changes: {
                  model: result.model,
                  errors_total: result.errors_total,
                  failed_at: now,
                  completed_at: now,
                },
              }),
        }))
        const moved = await transitionEach(tx, moves, now, 'validation finished')
        // SPEC §7: at most MAX_STORED_ERRORS stored per batch; a stale run (row null) writes nothing.
        const errors = items.flatMap(({ batchId, result }, i) =>
          moved[i] ? result.errors.map((e) => ({ batch_id: batchId, ...e })) : [],
        )
        if (errors.length > 0) await tx.insert(batchErrors).values(errors)
        return moved
      })
    },
  }
}
