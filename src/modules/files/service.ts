import { and, eq, inArray, isNull, type SQL } from 'drizzle-orm'
import { batchAssignments, batches, type FileRow, files } from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { type PageParams, pageRows, toPage } from '../../lib/pagination'
import type { UserPrincipal, WorkerPrincipal } from '../auth/credentials'
import { type FileObject, toFileObject } from './model'
import { receiveUpload, type UploadInput } from './upload'

// Files (API.md §5): uploads of batch input, and the output and error files the workers
// workstream writes as rows owned by the batch's owner. Another user's file is a 404.

const NON_TERMINAL = ['validating', 'validated', 'in_progress'] as const

const isSuperadmin = (p: UserPrincipal) => p.user.platform_role === 'superadmin'

/**
 * POST /v1/files: streams the upload into the blob store under the new file's id, publishes it
 * once the form is complete and valid, and records it. Any failure leaves no blob behind.
 */
export async function uploadFile(
  deps: Deps,
  principal: UserPrincipal,
  input: UploadInput,
): Promise<FileObject> {
  const id = newId('file-')
  const writer = deps.blobs.create(id)
  try {
    const upload = await receiveUpload(input, { maxBytes: deps.config.MAX_UPLOAD_BYTES, writer })
    await writer.publish()
    const row = writeTx(deps.db, (tx) =>
      tx
        .insert(files)
        .values({
          id,
          user_id: principal.user.id,
          filename: upload.filename,
          purpose: upload.purpose,
          bytes: upload.bytes,
          created_at: deps.clock.now(),
        })
        .returning()
        .get(),
    )
    log.info('file uploaded', { file_id: id, user_id: principal.user.id, bytes: upload.bytes })
    return toFileObject(row)
  } catch (e) {
    await writer.abort()
    throw e
  }
}

export function listFiles(
  deps: Deps,
  principal: UserPrincipal,
  query: PageParams & { purpose?: FileRow['purpose'] },
) {
  const where = and(
    eq(files.user_id, principal.user.id),
    query.purpose ? eq(files.purpose, query.purpose) : undefined,
  )
  const { rows, has_more } = pageRows<FileRow>(deps.db, files, where, query)
  return toPage(rows.map(toFileObject), has_more)
}

function findFile(deps: Deps, fileId: string, visibleTo?: SQL): FileRow {
  const row = deps.db
    .select()
    .from(files)
    .where(and(eq(files.id, fileId), visibleTo))
    .get()
  if (!row) throw notFound('file_not_found', 'No such file', 'file_id')
  return row
}

/** The owner's file, or any file for a superadmin. */
function userFile(deps: Deps, principal: UserPrincipal, fileId: string): FileRow {
  return findFile(deps, fileId, isSuperadmin(principal) ? undefined : eq(files.user_id, principal.user.id))
}

export const getFile = (deps: Deps, principal: UserPrincipal, fileId: string) =>
  toFileObject(userFile(deps, principal, fileId))

/** DELETE /v1/files/{id}: refused while a batch that has not finished reads it (API.md §5). */
export async function deleteFile(deps: Deps, principal: UserPrincipal, fileId: string) {
  writeTx(deps.db, (tx) => {
    const row = tx
      .select({ id: files.id })
      .from(files)
      .where(and(eq(files.id, fileId), eq(files.user_id, principal.user.id)))
      .get()
    if (!row) throw notFound('file_not_found', 'No such file', 'file_id')
    const user = tx
      .select({ id: batches.id })
      .from(batches)
      .where(and(eq(batches.input_file_id, fileId), inArray(batches.status, [...NON_TERMINAL])))
      .get()
    if (user) {
      throw badRequest(
        'file_in_use',
        `The file is the input of batch ${user.id}, which has not finished`,
        'file_id',
      )
    }
    tx.delete(files).where(eq(files.id, fileId)).run()
  })
  await deps.blobs.remove(fileId)
  log.info('file deleted', { file_id: fileId, user_id: principal.user.id })
  return { id: fileId, object: 'file' as const, deleted: true as const }
}

/**
 * GET /v1/files/{id}/content (API.md §5 readers): the owner, a superadmin, or a worker key whose
 * org has a worker holding a current assignment of a batch whose input is this file. Anyone else
 * gets the same 404 as for a file that does not exist.
 */
export async function openContent(
  deps: Deps,
  principal: UserPrincipal | WorkerPrincipal,
  fileId: string,
): Promise<{ file: FileRow; body: Blob | ReadableStream<Uint8Array> }> {
  const file =
    principal.kind === 'worker'
      ? findFile(deps, fileId, workerMayRead(deps, principal))
      : userFile(deps, principal, fileId)
  const body = await deps.blobs.body(file.id)
  if (!body) throw notFound('file_not_found', 'No such file', 'file_id')
  return { file, body }
}

// The assignment is current while its batch is in progress and the run has not completed; a
// requeue deletes it (SPEC §3), so a worker that lost the batch loses access with it.
function workerMayRead(deps: Deps, principal: WorkerPrincipal): SQL {
  const held = deps.db
    .select({ id: batches.input_file_id })
    .from(batchAssignments)
    .innerJoin(batches, eq(batches.id, batchAssignments.batch_id))
    .where(
      and(
        eq(batchAssignments.org_id, principal.orgId),
        isNull(batchAssignments.completed_at),
        eq(batches.status, 'in_progress'),
      ),
    )
  return inArray(files.id, held)
}
