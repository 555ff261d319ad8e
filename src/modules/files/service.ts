import type { FileRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { AuditContext } from '../../domain/audit'
import type { UserPrincipal, WorkerPrincipal } from '../../domain/principal'
import { shardDoneElsewhere } from '../../domain/shards'
import { readSpans } from '../../lib/blobs/spans'
import { ensureFreeDisk } from '../../lib/disk'
import { AppError, badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { FORM_OVERHEAD_BYTES, refuseUnread } from '../../lib/multipart'
import { type PageParams, toPage } from '../../lib/pagination'
import { type FileObject, toFileObject } from './model'
import { quotaExceeded, receiveUpload, type UploadInput } from './upload'

// Files (docs/api.md §5): uploads of batch input, and the output and error files the workers
// workstream writes as rows owned by the batch's owner. Another user's file is a 404.

const isSuperadmin = (p: UserPrincipal) => p.user.platform_role === 'superadmin'

/**
 * POST /v1/files: streams the upload into the blob store under the new file's id, publishes it
 * once the form is complete and valid, and records it. Any failure leaves no blob behind.
 * docs/api.md §15: a disk below MIN_FREE_DISK_BYTES is a 507 and a full quota a 400 `quota_exceeded`,
 * both decided before the body is read when they can be, else while it streams.
 */
export async function uploadFile(
  deps: Deps,
  principal: UserPrincipal,
  input: UploadInput,
): Promise<FileObject> {
  const declared = Number(input.contentLength ?? Number.NaN)
  try {
    await ensureFreeDisk(deps.disk, deps.config.MIN_FREE_DISK_BYTES, Number.isFinite(declared) ? declared : 0)
  } catch (e) {
    throw e instanceof AppError ? refuseUnread(input, e) : e
  }
  const quotaBytes = deps.config.USER_STORAGE_QUOTA_BYTES
  let quota: { roomBytes: number; quotaBytes: number } | undefined
  if (quotaBytes !== undefined) {
    const roomBytes = quotaBytes - (await deps.store.files.storedBytes(principal.user.id))
    // The file is at least the body less its multipart framing.
    const fileAtLeast = Number.isFinite(declared) ? declared - FORM_OVERHEAD_BYTES : 1
    if (fileAtLeast > roomBytes) throw refuseUnread(input, quotaExceeded(quotaBytes))
    quota = { roomBytes, quotaBytes }
  }
  const id = newId('file-')
  const writer = deps.blobs.create(id)
  try {
    const upload = await receiveUpload(input, { maxBytes: deps.config.MAX_UPLOAD_BYTES, writer, quota })
    await writer.publish()
    const now = deps.clock.now()
    const file = {
      id,
      user_id: principal.user.id,
      filename: upload.filename,
      purpose: upload.purpose,
      bytes: upload.bytes,
      created_at: now,
      // expires_after's anchor is created_at (OpenAI's only anchor).
      expires_at: upload.expiresAfterSeconds === null ? null : now + upload.expiresAfterSeconds,
    }
    // The quota again, atomically: concurrent uploads of one owner cannot both fit its last room.
    const row =
      quotaBytes === undefined
        ? await deps.store.files.insert(file)
        : await deps.store.files.insertWithinQuota(file, quotaBytes)
    if (!row) throw quotaExceeded(quotaBytes!)
    log.info('file uploaded', { file_id: id, user_id: principal.user.id, bytes: upload.bytes })
    return toFileObject(row)
  } catch (e) {
    await writer.abort()
    throw e
  }
}

export async function listFiles(
  deps: Deps,
  principal: UserPrincipal,
  query: PageParams & { purpose?: FileRow['purpose'] },
) {
  const { rows, has_more } = await deps.store.files.page(
    { ownerId: principal.user.id, purpose: query.purpose, now: deps.clock.now() },
    query,
  )
  return toPage(rows.map(toFileObject), has_more)
}

const notFoundFile = () => notFound('file_not_found', 'No such file', 'file_id')

/** The owner's file, or any file for a superadmin. */
async function userFile(deps: Deps, principal: UserPrincipal, fileId: string): Promise<FileRow> {
  const row = await deps.store.files.get(
    fileId,
    isSuperadmin(principal) ? null : principal.user.id,
    deps.clock.now(),
  )
  if (!row) throw notFoundFile()
  return row
}

export const getFile = async (deps: Deps, principal: UserPrincipal, fileId: string) =>
  toFileObject(await userFile(deps, principal, fileId))

/** DELETE /v1/files/{id}: refused while a batch that has not finished reads it (docs/api.md §5). */
export async function deleteFile(deps: Deps, principal: UserPrincipal, fileId: string, audit: AuditContext) {
  const outcome = await deps.store.files.remove(fileId, principal.user.id, deps.clock.now(), audit)
  if (!outcome.removed) {
    if (outcome.reason === 'not_found') throw notFoundFile()
    throw badRequest(
      'file_in_use',
      `The file is the input of batch ${outcome.batchId}, which has not finished`,
      'file_id',
    )
  }
  await deps.blobs.remove(fileId)
  log.info('file deleted', { file_id: fileId, user_id: principal.user.id })
  return { id: fileId, object: 'file' as const, deleted: true as const }
}

/**
 * GET /v1/files/{id}/content (docs/api.md §5 readers): the owner, a superadmin, or a worker key whose
 * org has a worker holding a current assignment of a batch whose input is this file. Anyone else
 * gets the same 404 as for a file that does not exist. `shard`: one shard's lines (docs/api.md §16);
 * `batch`: that batch's request lines in its execution order (docs/api.md §6), same readers.
 */
export async function openContent(
  deps: Deps,
  principal: UserPrincipal | WorkerPrincipal,
  fileId: string,
  query: { shard?: string; batch?: string } = {},
): Promise<{ body: Blob | ReadableStream<Uint8Array> }> {
  if (query.shard !== undefined) return openShardInput(deps, principal, fileId, query.shard)
  const file =
    principal.kind === 'worker'
      ? await deps.store.files.getForWorker(fileId, principal.orgId)
      : await userFile(deps, principal, fileId)
  if (!file) throw notFoundFile()
  if (query.batch !== undefined) {
    const batch = await deps.store.batches.get(query.batch, null)
    if (batch?.input_file_id !== fileId) throw notFoundFile()
    // A batch in the file order (or without an index) is the file itself.
    const spans = batch.ordered
      ? await deps.store.queue.lineSpans(batch.id, 0, batch.request_counts_total)
      : null
    if (spans) {
      const body = await readSpans(deps.blobs, fileId, spans)
      if (!body) throw notFoundFile()
      return { body }
    }
  }
  const body = await deps.blobs.body(file.id)
  if (!body) throw notFoundFile()
  return { body }
}

/**
 * GET /v1/files/{id}/content?shard=… (docs/api.md §16): exactly the shard's request lines, in the
 * batch's execution order, found through the request-line index (one byte range in the file order). Readers: a worker key whose org holds the shard
 * now or runs its backup copy, or whoever may read the whole file (the owner, a superadmin).
 * Anything else is a 404, but for the org of a backup race's losing copy: 409 shard_done_elsewhere.
 */
async function openShardInput(
  deps: Deps,
  principal: UserPrincipal | WorkerPrincipal,
  fileId: string,
  shardId: string,
) {
  const held = await deps.store.queue.shardWithBatch(shardId)
  if (!held || held.batch.input_file_id !== fileId) throw notFoundFile()
  if (principal.kind === 'worker') {
    // The org of either running copy: the holder's, or its backup's. Once the shard is done, the
    // org of the copy that lost hears why (docs/api.md §16), so its daemon drops the job quietly.
    const { status, org_id, backup_org_id } = held.shard
    if (status === 'done' && backup_org_id === principal.orgId) throw shardDoneElsewhere()
    if (status !== 'running' || (org_id !== principal.orgId && backup_org_id !== principal.orgId))
      throw notFoundFile()
  } else if (!(await userFile(deps, principal, fileId))) throw notFoundFile()
  const { shard } = held
  const spans = await deps.store.queue.lineSpans(shard.batch_id, shard.first_request, shard.requests)
  const body = spans && (await readSpans(deps.blobs, fileId, spans))
  if (!body) throw notFoundFile()
  return { body }
}
