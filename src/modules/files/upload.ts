import type { BlobWriter } from '../../lib/blobs'
import { badRequest, tooLarge } from '../../lib/errors'
import { type MultipartInput, receiveMultipart } from '../../lib/multipart'

// The form of POST /v1/files (docs/api.md §5, §15): exactly one `.jsonl` file, not empty, not over
// MAX_UPLOAD_BYTES; `purpose` = `batch`; optionally OpenAI's `expires_after[anchor]` and
// `expires_after[seconds]`; no other field. The bytes stream into a blob writer; the caller
// publishes it only if this resolves.

export type UploadInput = MultipartInput

export interface ReceivedUpload {
  filename: string
  purpose: 'batch'
  bytes: number
  /** expires_after[seconds] (anchor created_at), or null: kept until deleted. */
  expiresAfterSeconds: number | null
}

// OpenAI's range for expires_after.seconds: one hour to thirty days.
export const EXPIRES_AFTER_MIN_SECONDS = 3600
export const EXPIRES_AFTER_MAX_SECONDS = 2_592_000

const ANCHOR = 'expires_after[anchor]'
const SECONDS = 'expires_after[seconds]'

export const quotaExceeded = (quotaBytes: number) =>
  badRequest(
    'quota_exceeded',
    `This upload would take your stored files over your quota of ${quotaBytes} bytes; delete files first`,
    'file',
  )

/** The client's filename as harmless metadata: no directories, no control characters, ≤255 chars. */
export function safeFilename(name: string | undefined): string {
  const base = (name ?? '').split(/[\\/]/).pop() ?? ''
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
  const cleaned = base.replace(/[\u0000-\u001f\u007f]/g, '').trim()
  return cleaned.length > 255 ? cleaned.slice(cleaned.length - 255) : cleaned
}

/** docs/api.md §15: both fields or neither; anchor `created_at`; seconds an integer in OpenAI's range. */
function expiresAfter(fields: Record<string, string>): number | null {
  const anchor = fields[ANCHOR]
  const seconds = fields[SECONDS]
  if (anchor === undefined && seconds === undefined) return null
  if (anchor === undefined) throw badRequest('missing_field', `Missing required field '${ANCHOR}'`, ANCHOR)
  if (seconds === undefined) throw badRequest('missing_field', `Missing required field '${SECONDS}'`, SECONDS)
  if (anchor !== 'created_at')
    throw badRequest('invalid_value', `Invalid field '${ANCHOR}': must be created_at`, ANCHOR)
  const n = /^\d{1,10}$/.test(seconds) ? Number(seconds) : Number.NaN
  if (!(n >= EXPIRES_AFTER_MIN_SECONDS && n <= EXPIRES_AFTER_MAX_SECONDS)) {
    throw badRequest(
      'invalid_value',
      `Invalid field '${SECONDS}': must be an integer from ${EXPIRES_AFTER_MIN_SECONDS} to ${EXPIRES_AFTER_MAX_SECONDS}`,
      SECONDS,
    )
  }
  return n
}

/** Streams the form's file into `writer` and checks the form; throws the AppError that answers it. */
export async function receiveUpload(
  input: UploadInput,
  opts: {
    maxBytes: number
    writer: BlobWriter
    /** USER_STORAGE_QUOTA_BYTES: the room left in the owner's quota and the quota itself. */
    quota?: { roomBytes: number; quotaBytes: number }
  },
): Promise<ReceivedUpload> {
  let filename = ''
  let bytes = 0
  const fields = await receiveMultipart(input, {
    fields: ['purpose', ANCHOR, SECONDS],
    maxFieldBytes: 1024,
    file: { name: 'file', maxBytes: opts.maxBytes },
    tooLarge: tooLarge('file_too_large', `Files are limited to ${opts.maxBytes} bytes`),
    contentTypeHint: 'Upload files as multipart/form-data (fields: file, purpose)',
    async onFile(stream, info) {
      filename = safeFilename(info.filename)
      if (!filename.toLowerCase().endsWith('.jsonl'))
        throw badRequest('invalid_file_type', 'Only .jsonl files are accepted', 'file')
      for await (const chunk of stream) {
        bytes += chunk.length
        // Decided while streaming when the size was not known up front (chunked uploads).
        if (opts.quota && bytes > opts.quota.roomBytes) throw quotaExceeded(opts.quota.quotaBytes)
        await opts.writer.write(chunk)
      }
    },
  })
  if (fields.purpose === undefined)
    throw badRequest('missing_field', "Missing required field 'purpose'", 'purpose')
  if (fields.purpose !== 'batch')
    throw badRequest('invalid_value', "Invalid field 'purpose': must be batch", 'purpose')
  const expiresAfterSeconds = expiresAfter(fields)
  if (bytes === 0) throw badRequest('empty_file', 'The file is empty', 'file')
  return { filename, purpose: 'batch', bytes, expiresAfterSeconds }
}
