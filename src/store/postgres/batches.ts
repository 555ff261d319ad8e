import type { SQL } from 'bun'
import { and, asc, eq, gt, inArray, isNull, lt, or, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { BatchRow, FileRow } from '../../db/schema'
import { NON_TERMINAL_STATUSES } from '../../domain/batch-states'
import type { Tally } from '../../domain/waiting'
import { type BatchesStore, lineIndexRow, newBatchRow, sumQueueTallies, validationMove } from '../batches'
import { batchTimesColumns, listedBatches } from '../statements'
import { type PgDb, pipelined } from './db'
import { pageRows } from './page'
import { batchRow, transitionEach } from './transition'

const { batches, batchErrors, batchLineIndex } = schema

/**
 * docs/api.md §6 `waiting` (queued): for each (batch, model, seq), the validated batches of that model
 * before it and their requests not yet done — one range of batches_validated_model each. The bound
 * is a row comparison, which only an index led by (model, seq) can take: written `seq < t.seq`, the
 * planner may walk the primary key over every batch created before this one instead.
 */
export const queueAhead = (q: SQL, pairs: { id: string; model: string; seq: number }[]) =>
  q`SELECT t.id AS "batchId", a.batches, a.requests
    FROM unnest(${pairs.map((p) => p.id)}::text[], ${pairs.map((p) => p.model)}::text[],
                ${pairs.map((p) => p.seq)}::bigint[]) AS t(id, model, seq)
    CROSS JOIN LATERAL (
      SELECT count(*)::int AS batches,
        coalesce(sum(request_counts_total - request_counts_completed - request_counts_failed), 0)::int
          AS requests
      FROM batches
      WHERE status = 'validated' AND model = t.model AND (model, seq) < (t.model, t.seq)) a` as Promise<
    ({ batchId: string } & Tally)[]
  >

export function postgresBatches(db: PgDb): BatchesStore {
  return {
    // Two round trips, pipelined on one connection: BEGIN with the file's check, then the insert
    // with COMMIT (drizzle's transaction took four, and built the whole row's query each time).
    async create(b, check) {
      const conn = await db.$client.reserve()
      try {
        // Locked: a DELETE /v1/files on another instance waits for this batch to exist.
        const found = await pipelined(conn, [
          conn`BEGIN`,
          conn`SELECT purpose, expires_at::float8 AS expires_at FROM files
               WHERE id = ${b.input_file_id} AND user_id = ${b.user_id} FOR SHARE`,
        ])
        const file = found[1]![0] as Pick<FileRow, 'purpose' | 'expires_at'> | undefined
        try {
          check(file)
        } catch (e) {
          await conn`ROLLBACK`
          throw e
        }
        const row = newBatchRow(b)
        const done = await pipelined(conn, [conn`INSERT INTO batches ${conn(row)} RETURNING *`, conn`COMMIT`])
        return batchRow(done[0]![0] as Record<string, unknown>)
      } finally {
        conn.release()
      }
    },

    async get(batchId, ownerId) {
      const [row] = await db
        .select()
        .from(batches)
        .where(and(eq(batches.id, batchId), ownerId === null ? undefined : eq(batches.user_id, ownerId)))
      return (row as BatchRow | undefined) ?? null
    },

    async page(filter, query) {
      return pageRows<BatchRow>(db, batches, listedBatches(batches, filter), query)
    },

    async errorsOf(batchIds) {
      if (batchIds.length === 0) return new Map()
      const rows = await db
        .select()
        .from(batchErrors)
        .where(inArray(batchErrors.batch_id, batchIds))
        .orderBy(asc(batchErrors.seq))
      return Map.groupBy(rows, (r) => r.batch_id)
    },

    async validatingIds() {
      const rows = await db
        .select({ id: batches.id })
        .from(batches)
        .where(eq(batches.status, 'validating'))
        .orderBy(asc(batches.seq))
      return rows.map((r) => r.id)
    },

    // docs/api.md §6 `waiting` (queued): per place and model, one index-only range of
    // batches_validated_model (the batches ahead only); per model, one range of batches_status_model.
    async queueTallies(places) {
      if (places.length === 0) return new Map()
      const pairs = places.flatMap((p) => p.models.map((model) => ({ id: p.batchId, model, seq: p.seq })))
      const models = [...new Set(pairs.map((p) => p.model))]
      const q = db.$client
      const [ahead, running] = await Promise.all([
        queueAhead(q, pairs),
        q`SELECT model, count(*)::int AS batches,
            coalesce(sum(request_counts_total - request_counts_completed - request_counts_failed), 0)::int
              AS requests
          FROM batches WHERE status = 'in_progress' AND model = ANY(${models}::text[])
          GROUP BY model` as Promise<({ model: string } & Tally)[]>,
      ])
      const byModel = new Map(running.map((r) => [r.model, { batches: r.batches, requests: r.requests }]))
      return sumQueueTallies(places, ahead, byModel)
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
          ...batchTimesColumns(batches),
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
        const moves = items.map(({ batchId, result }) => ({ batchId, ...validationMove(result, now) }))
        const moved = await transitionEach(tx, moves, now, 'validation finished')
        // docs/api.md §6: at most MAX_STORED_ERRORS stored per batch; a stale run (row null) writes nothing.
        const errors = items.flatMap(({ batchId, result }, i) =>
          moved[i] ? result.errors.map((e) => ({ batch_id: batchId, ...e })) : [],
        )
        if (errors.length > 0) await tx.insert(batchErrors).values(errors)
        // docs/api.md §16: where each request line starts, for a batch that passed (it may be split).
        const indexes = items.flatMap(({ batchId, result }, i) => {
          const index = moved[i] && lineIndexRow(batchId, result)
          return index ? [index] : []
        })
        if (indexes.length > 0) await tx.insert(batchLineIndex).values(indexes)
        return moved
      })
    },
  }
}
