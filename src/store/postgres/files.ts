import { and, asc, eq, inArray, lte, notInArray, sql } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { FileRow } from '../../db/schema'
import { fileDeleted, filesExpired } from '../../domain/audit'
import { NON_TERMINAL_STATUSES } from '../../domain/batch-states'
import type { FilesStore } from '../files'
import { heldInputOf, listedFiles, liveFile } from '../statements'
import { appendAudit } from './audit'
import type { PgDb } from './db'
import { pageRows } from './page'

const { batchAssignments, batches, files, users } = schema

const bytesSum = sql<number>`coalesce(sum(${files.bytes}), 0)`.mapWith(Number)

/** The input files of batches that have not finished (docs/api.md §15: never expired meanwhile). */
const inputsInUse = (tx: Pick<PgDb, 'select'>) =>
  tx
    .select({ id: batches.input_file_id })
    .from(batches)
    .where(inArray(batches.status, [...NON_TERMINAL_STATUSES]))

export function postgresFiles(db: PgDb): FilesStore {
  return {
    async insert(file) {
      const [row] = await db.insert(files).values(file).returning()
      return row as FileRow
    },

    async insertWithinQuota(file, quotaBytes) {
      return db.transaction(async (tx) => {
        // The owner's row is the lock: concurrent uploads of one owner, on any instance, are
        // summed one after the other.
        await tx.select({ id: users.id }).from(users).where(eq(users.id, file.user_id)).for('update')
        const [used] = await tx.select({ n: bytesSum }).from(files).where(eq(files.user_id, file.user_id))
        if (used!.n + file.bytes > quotaBytes) return null
        const [row] = await tx.insert(files).values(file).returning()
        return row as FileRow
      })
    },

    async storedBytes(ownerId) {
      const [used] = await db.select({ n: bytesSum }).from(files).where(eq(files.user_id, ownerId))
      return used!.n
    },

    async storedBytesByPurpose() {
      return db.select({ purpose: files.purpose, bytes: bytesSum }).from(files).groupBy(files.purpose)
    },

    async get(fileId, ownerId, now) {
      const [row] = await db
        .select()
        .from(files)
        .where(
          and(
            eq(files.id, fileId),
            liveFile(files, now),
            ownerId === null ? undefined : eq(files.user_id, ownerId),
          ),
        )
      return (row as FileRow | undefined) ?? null
    },

    async getForWorker(fileId, orgId) {
      const [row] = await db
        .select()
        .from(files)
        .where(heldInputOf({ files, batches, assignments: batchAssignments }, fileId, orgId))
      return (row as FileRow | undefined) ?? null
    },

    async page(filter, query) {
      return pageRows<FileRow>(db, files, listedFiles(files, filter), query)
    },

    async remove(fileId, ownerId, now, audit) {
      return db.transaction(async (tx) => {
        // Locked: a POST /v1/batches naming this file (which share-locks it) waits or is seen.
        const [row] = await tx
          .select({ id: files.id, filename: files.filename, purpose: files.purpose, bytes: files.bytes })
          .from(files)
          .where(and(eq(files.id, fileId), eq(files.user_id, ownerId)))
          .for('update')
        if (!row) return { removed: false as const, reason: 'not_found' as const }
        const [user] = await tx
          .select({ id: batches.id })
          .from(batches)
          .where(and(eq(batches.input_file_id, fileId), inArray(batches.status, [...NON_TERMINAL_STATUSES])))
          .limit(1)
        if (user) return { removed: false as const, reason: 'in_use' as const, batchId: user.id }
        await tx.delete(files).where(eq(files.id, fileId))
        await appendAudit(tx, audit, [fileDeleted(row)], now)
        return { removed: true as const }
      })
    },

    async expire(now, limit, audit) {
      return db.transaction(async (tx) => {
        // Locked, skipping a file a POST /v1/batches is naming right now (it share-locks it).
        const locked = await tx
          .select({ id: files.id })
          .from(files)
          .where(and(lte(files.expires_at, now), notInArray(files.id, inputsInUse(tx))))
          .orderBy(asc(files.expires_at))
          .limit(limit)
          .for('update', { skipLocked: true })
        if (locked.length === 0) return []
        const ids = locked.map((r) => r.id)
        // Read again under the locks: a batch committed after the first statement's snapshot and
        // before the lock is seen now, and no new one can name these files until we commit.
        const deleted = await tx
          .delete(files)
          .where(and(inArray(files.id, ids), notInArray(files.id, inputsInUse(tx))))
          .returning()
        await appendAudit(tx, audit, filesExpired(deleted as FileRow[]), now)
        return deleted as FileRow[]
      })
    },
  }
}
