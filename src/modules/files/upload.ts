import type { BlobWriter } from '../../lib/blobs'
import { badRequest, tooLarge } from '../../lib/errors'
import { type MultipartInput, receiveMultipart } from '../../lib/multipart'

// The form of POST /v1/files (API.md §5): exactly one `.jsonl` file, not empty, not over
// MAX_UPLOAD_BYTES; `purpose` = `batch`; no other field. The bytes stream into a blob writer;
// the caller publishes it only if this resolves.

export type UploadInput = MultipartInput

export interface ReceivedUpload {
  filename: string
  purpose: 'batch'
  bytes: number
}

/** The client's filename as harmless metadata: no directories, no control characters, ≤255 chars. */
export function safeFilename(name: string | undefined): string {
  const base = (name ?? '').split(/[\\/]/).pop() ?? ''
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
  const cleaned = base.replace(/[\u0000-\u001f\u007f]/g, '').trim()
  return cleaned.length > 255 ? cleaned.slice(cleaned.length - 255) : cleaned
}

/** Streams the form's file into `writer` and checks the form; throws the AppError that answers it. */
export async function receiveUpload(
  input: UploadInput,
  opts: { maxBytes: number; writer: BlobWriter },
): Promise<ReceivedUpload> {
  let filename = ''
  let bytes = 0
  const fields = await receiveMultipart(input, {
    fields: ['purpose'],
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
        await opts.writer.write(chunk)
      }
    },
  })
  if (fields.purpose === undefined)
    throw badRequest('missing_field', "Missing required field 'purpose'", 'purpose')
  if (fields.purpose !== 'batch')
    throw badRequest('invalid_value', "Invalid field 'purpose': must be batch", 'purpose')
  if (bytes === 0) throw badRequest('empty_file', 'The file is empty', 'file')
  return { filename, purpose: 'batch', bytes }
}
