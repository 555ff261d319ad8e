import { t } from 'elysia'
import type { FileRow } from '../../db/schema'
import { PageQuery } from '../../lib/pagination'
import { pick } from '../../lib/pick'
import { EXPIRES_AFTER_MAX_SECONDS, EXPIRES_AFTER_MIN_SECONDS } from './upload'

export const FilePurpose = t.Union([t.Literal('batch'), t.Literal('batch_output')])

export const FileModel = {
  params: t.Object({ file_id: t.String({ maxLength: 128 }) }),
  // docs/api.md §16: a shard job's input_path names its shard; docs/api.md §6 "Execution order": a
  // whole batch's, its batch.
  content: t.Object(
    {
      shard: t.Optional(t.String({ minLength: 1, maxLength: 64 })),
      batch: t.Optional(t.String({ minLength: 1, maxLength: 64 })),
    },
    { additionalProperties: false },
  ),
  list: t.Object({ ...PageQuery, purpose: t.Optional(FilePurpose) }, { additionalProperties: false }),
  // Documents the multipart form; the route streams the body itself (src/modules/files/upload.ts).
  upload: t.Object({
    file: t.File({ description: 'The .jsonl input file' }),
    purpose: t.Literal('batch'),
    'expires_after[anchor]': t.Optional(t.Literal('created_at')),
    'expires_after[seconds]': t.Optional(
      t.Integer({ minimum: EXPIRES_AFTER_MIN_SECONDS, maximum: EXPIRES_AFTER_MAX_SECONDS }),
    ),
  }),
}

// docs/api.md §5: the OpenAI file object.
export const FileObject = t.Object({
  id: t.String(),
  object: t.Literal('file'),
  bytes: t.Integer(),
  created_at: t.Integer(),
  filename: t.String(),
  purpose: FilePurpose,
  status: t.Literal('processed'),
  /** docs/api.md §15 (OpenAI's field): when the file is deleted; null = kept until deleted. */
  expires_at: t.Union([t.Integer(), t.Null()]),
})
export type FileObject = typeof FileObject.static

export const toFileObject = (f: FileRow): FileObject => ({
  id: f.id,
  object: 'file',
  ...pick(f, ['bytes', 'created_at', 'filename', 'purpose']),
  status: 'processed',
  expires_at: f.expires_at,
})
