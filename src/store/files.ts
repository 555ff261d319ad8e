import type { FileRow } from '../db/schema'
import type { AuditContext } from '../domain/audit'
import type { PageParams } from '../lib/pagination'

// File records (docs/api.md §5): the bytes live in the blob store (src/lib/blobs); these are the rows.

export type NewFile = Omit<FileRow, 'seq' | 'batch_id' | 'expires_at'> & {
  batch_id?: string | null
  expires_at?: number | null
}

export interface FilesStore {
  /** Records an uploaded file whose bytes are published. */
  insert(file: NewFile): Promise<FileRow>
  /**
   * POST /v1/files under USER_STORAGE_QUOTA_BYTES (docs/api.md §15): records the file only if the
   * owner's stored bytes (every file they own) plus this one stay within `quotaBytes`, decided
   * atomically against concurrent uploads of the same owner; null when it would go over.
   */
  insertWithinQuota(file: NewFile, quotaBytes: number): Promise<FileRow | null>
  /** The bytes of every file `ownerId` owns (docs/api.md §15 quota: what counts). */
  storedBytes(ownerId: string): Promise<number>
  /** The bytes of every stored file, by purpose (the gridkeep_stored_bytes gauge). */
  storedBytesByPurpose(): Promise<{ purpose: FileRow['purpose']; bytes: number }[]>
  /**
   * One file; with `ownerId`, only if that user owns it (null = any owner: a superadmin). A file
   * whose expires_at is at or before `now` is gone already for its readers (docs/api.md §15), even
   * before the retention pass removes it.
   */
  get(fileId: string, ownerId: string | null, now: number): Promise<FileRow | null>
  /**
   * The file if `orgId` has a worker holding a current assignment of a batch whose input it is
   * (docs/api.md §5: workers read their job's input). A requeue deletes the assignment, so a worker
   * that lost the batch loses access with it.
   */
  getForWorker(fileId: string, orgId: string): Promise<FileRow | null>
  /** GET /v1/files: the owner's files not expired at `now`, newest first, optional purpose filter. */
  page(
    filter: { ownerId: string; purpose?: FileRow['purpose']; now: number },
    query: PageParams,
  ): Promise<{ rows: FileRow[]; has_more: boolean }>
  /**
   * DELETE /v1/files/{id}: removes the owner's file record unless a batch that has not finished
   * reads it, atomically (a POST /v1/batches cannot slip in between), with its `file.deleted` entry.
   */
  remove(
    fileId: string,
    ownerId: string,
    now: number,
    audit: AuditContext,
  ): Promise<
    | { removed: true }
    | { removed: false; reason: 'not_found' }
    | { removed: false; reason: 'in_use'; batchId: string }
  >
  /**
   * The retention pass (docs/api.md §15): deletes up to `limit` file records whose expires_at is at or
   * before `now`, except a file that a batch which has not finished reads (its expiry waits for
   * that batch), atomically against a POST /v1/batches naming it, with one
   * `retention.files_expired` entry naming them. Returns the deleted records; their bytes are the
   * caller's to remove.
   */
  expire(now: number, limit: number, audit: AuditContext): Promise<FileRow[]>
}
