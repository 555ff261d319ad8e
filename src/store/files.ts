import type { FileRow } from '../db/schema'
import type { PageParams } from '../lib/pagination'

// File records (API.md §5): the bytes live in the blob store (src/lib/blobs); these are the rows.

export type NewFile = Omit<FileRow, 'seq' | 'batch_id'> & { batch_id?: string | null }

export interface FilesStore {
  /** Records an uploaded file whose bytes are published. */
  insert(file: NewFile): Promise<FileRow>
  /** One file; with `ownerId`, only if that user owns it (null = any owner: a superadmin). */
  get(fileId: string, ownerId: string | null): Promise<FileRow | null>
  /**
   * The file if `orgId` has a worker holding a current assignment of a batch whose input it is
   * (API.md §5: workers read their job's input). A requeue deletes the assignment, so a worker
   * that lost the batch loses access with it.
   */
  getForWorker(fileId: string, orgId: string): Promise<FileRow | null>
  /** GET /v1/files: the owner's files, newest first, optional purpose filter. */
  page(
    filter: { ownerId: string; purpose?: FileRow['purpose'] },
    query: PageParams,
  ): Promise<{ rows: FileRow[]; has_more: boolean }>
  /**
   * DELETE /v1/files/{id}: removes the owner's file record unless a batch that has not finished
   * reads it, atomically (a POST /v1/batches cannot slip in between).
   */
  remove(
    fileId: string,
    ownerId: string,
  ): Promise<
    | { removed: true }
    | { removed: false; reason: 'not_found' }
    | { removed: false; reason: 'in_use'; batchId: string }
  >
}
