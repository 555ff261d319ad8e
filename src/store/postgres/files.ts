import { and, eq, inArray, isNull } from 'drizzle-orm'
import * as schema from '../../db/pg/schema'
import type { FileRow } from '../../db/schema'
import { NON_TERMINAL_STATUSES } from '../../modules/batches/states'
import type { FilesStore } from '../files'
import type { PgDb } from './db'
import { pageRows } from './page'

const { batchAssignments, batches, files } = schema

export function postgresFiles(db: PgDb): FilesStore {
  return {
    async insert(file) {
      const [row] = await db.insert(files).values(file).returning()
      return row as FileRow
    },

    async get(fileId, ownerId) {
      const [row] = await db
        .select()
        .from(files)
        .where(and(eq(files.id, fileId), ownerId === null ? undefined : eq(files.user_id, ownerId)))
      return (row as FileRow | undefined) ?? null
    },

    async getForWorker(fileId, orgId) {
      const held = db
        .select({ id: batches.input_file_id })
        .from(batchAssignments)
        .innerJoin(batches, eq(batches.id, batchAssignments.batch_id))
        .where(
          and(
            eq(batchAssignments.org_id, orgId),
            isNull(batchAssignments.completed_at),
            eq(batches.status, 'in_progress'),
            eq(batches.input_file_id, fileId),
          ),
        )
      const [row] = await db
        .select()
        .from(files)
        .where(and(eq(files.id, fileId), inArray(files.id, held)))
      return (row as FileRow | undefined) ?? null
    },

    async page(filter, query) {
      const where = and(
        eq(files.user_id, filter.ownerId),
        filter.purpose ? eq(files.purpose, filter.purpose) : undefined,
      )
      return pageRows<FileRow>(db, files, where, query)
    },

    async remove(fileId, ownerId) {
      return db.transaction(async (tx) => {
        // Locked: a POST /v1/batches naming this file (which share-locks it) waits or is seen.
        const [row] = await tx
          .select({ id: files.id })
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
        return { removed: true as const }
      })
    },
  }
}
