import { and, asc, eq, inArray, lte, notInArray, sql } from 'drizzle-orm'
import { batchAssignments, batches, type FileRow, files } from '../../db/schema'
import { writeTx } from '../../db/tx'
import { fileDeleted, filesExpired } from '../../domain/audit'
import { NON_TERMINAL_STATUSES } from '../../domain/batch-states'
import type { FilesStore } from '../files'
import { heldInputOf, listedFiles, liveFile } from '../statements'
import { appendAudit } from './audit'
import type { SqliteDeps } from './deps'
import { pageRows } from './page'

const bytesSum = sql<number>`coalesce(sum(${files.bytes}), 0)`.mapWith(Number)

export function sqliteFiles(deps: SqliteDeps): FilesStore {
  const { db } = deps
  return {
    async insert(file) {
      return writeTx(db, (tx) => tx.insert(files).values(file).returning().get())
    },

    async insertWithinQuota(file, quotaBytes) {
      // BEGIN IMMEDIATE: two uploads of one owner are summed one after the other.
      return writeTx(db, (tx) => {
        const used = tx.select({ n: bytesSum }).from(files).where(eq(files.user_id, file.user_id)).get()!.n
        if (used + file.bytes > quotaBytes) return null
        return tx.insert(files).values(file).returning().get()
      })
    },

    async storedBytes(ownerId) {
      return db.select({ n: bytesSum }).from(files).where(eq(files.user_id, ownerId)).get()!.n
    },

    async storedBytesByPurpose() {
      return db.select({ purpose: files.purpose, bytes: bytesSum }).from(files).groupBy(files.purpose).all()
    },

    async get(fileId, ownerId, now) {
      const row = db
        .select()
        .from(files)
        .where(and(eq(files.id, fileId), liveFile(files, now)))
        .get()
      return row && (ownerId === null || row.user_id === ownerId) ? row : null
    },

    async getForWorker(fileId, orgId) {
      return (
        db
          .select()
          .from(files)
          .where(heldInputOf({ files, batches, assignments: batchAssignments }, fileId, orgId))
          .get() ?? null
      )
    },

    async page(filter, query) {
      return pageRows<FileRow>(db, files, listedFiles(files, filter), query)
    },

    async remove(fileId, ownerId, now, audit) {
      return writeTx(db, (tx) => {
        const row = tx
          .select({ id: files.id, filename: files.filename, purpose: files.purpose, bytes: files.bytes })
          .from(files)
          .where(and(eq(files.id, fileId), eq(files.user_id, ownerId)))
          .get()
        if (!row) return { removed: false as const, reason: 'not_found' as const }
        const user = tx
          .select({ id: batches.id })
          .from(batches)
          .where(and(eq(batches.input_file_id, fileId), inArray(batches.status, [...NON_TERMINAL_STATUSES])))
          .get()
        if (user) return { removed: false as const, reason: 'in_use' as const, batchId: user.id }
        tx.delete(files).where(eq(files.id, fileId)).run()
        appendAudit(tx, audit, [fileDeleted(row)], now)
        return { removed: true as const }
      })
    },

    async expire(now, limit, audit) {
      return writeTx(db, (tx) => {
        const due = tx
          .select({ id: files.id })
          .from(files)
          .where(and(lte(files.expires_at, now), notInArray(files.id, inputsInUse(tx))))
          .orderBy(asc(files.expires_at))
          .limit(limit)
          .all()
          .map((r) => r.id)
        if (due.length === 0) return []
        const deleted = tx.delete(files).where(inArray(files.id, due)).returning().all()
        appendAudit(tx, audit, filesExpired(deleted), now)
        return deleted
      })
    },
  }
}

/** The input files of batches that have not finished (docs/api.md §15: never expired meanwhile). */
const inputsInUse = (tx: Pick<SqliteDeps['db'], 'select'>) =>
  tx
    .select({ id: batches.input_file_id })
    .from(batches)
    .where(inArray(batches.status, [...NON_TERMINAL_STATUSES]))
