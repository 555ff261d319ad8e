import { and, eq, inArray, isNull } from 'drizzle-orm'
import { batchAssignments, batches, type FileRow, files } from '../../db/schema'
import { writeTx } from '../../db/tx'
import { pageRows } from '../../lib/pagination'
import { NON_TERMINAL_STATUSES } from '../../modules/batches/states'
import type { FilesStore } from '../files'
import type { SqliteDeps } from './queue'

export function sqliteFiles(deps: SqliteDeps): FilesStore {
  const { db } = deps
  return {
    async insert(file) {
      return writeTx(db, (tx) => tx.insert(files).values(file).returning().get())
    },

    async get(fileId, ownerId) {
      const row = db.select().from(files).where(eq(files.id, fileId)).get()
      return row && (ownerId === null || row.user_id === ownerId) ? row : null
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
      return (
        db
          .select()
          .from(files)
          .where(and(eq(files.id, fileId), inArray(files.id, held)))
          .get() ?? null
      )
    },

    async page(filter, query) {
      const where = and(
        eq(files.user_id, filter.ownerId),
        filter.purpose ? eq(files.purpose, filter.purpose) : undefined,
      )
      return pageRows<FileRow>(db, files, where, query)
    },

    async remove(fileId, ownerId) {
      return writeTx(db, (tx) => {
        const row = tx
          .select({ id: files.id })
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
        return { removed: true as const }
      })
    },
  }
}
