import { createWriteStream } from 'node:fs'
import { rm } from 'node:fs/promises'
import { pipeline } from 'node:stream/promises'
import busboy from 'busboy'
import { AppError, badRequest, tooLarge } from '../../lib/errors'

// Receives the multipart upload of POST /v1/files (API.md §5) straight from the request stream
// to disk: busboy parses the parts as the bytes arrive, the file part is piped to `tmpPath` with
// backpressure, so memory does not grow with the file (Bun's formData() and Elysia's t.File()
// buffer the whole body). Chunked uploads without Content-Length (the openai SDK's streaming
// uploads) work the same way. The size cap is enforced while streaming: past it the request
// body is cancelled at once (the client still receives the 413) and the partial file removed.

/** Room for the multipart framing and the small `purpose` field around the file itself. */
const FORM_OVERHEAD_BYTES = 64 * 1024

export interface UploadInput {
  contentType: string | null
  contentLength: string | null
  body: ReadableStream<Uint8Array> | null
}

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

/**
 * Streams the form to `tmpPath` and checks it (exactly one `.jsonl` file, not empty, not over
 * `maxBytes`; `purpose` = `batch`; no other field). On any failure the partial file is removed
 * and an AppError thrown.
 */
export async function receiveUpload(
  input: UploadInput,
  opts: { maxBytes: number; tmpPath: string },
): Promise<ReceivedUpload> {
  const type = input.contentType ?? ''
  if (!/^multipart\/form-data\s*;/i.test(type)) {
    throw badRequest('invalid_content_type', 'Upload files as multipart/form-data (fields: file, purpose)')
  }
  const declared = Number(input.contentLength ?? Number.NaN)
  if (Number.isFinite(declared) && declared > opts.maxBytes + FORM_OVERHEAD_BYTES) {
    input.body?.cancel().catch(() => {})
    throw closing(fileTooLarge(opts.maxBytes))
  }
  if (!input.body) throw badRequest('missing_field', "Missing required field 'file'", 'file')

  let bb: busboy.Busboy
  try {
    bb = busboy({
      headers: { 'content-type': type },
      defParamCharset: 'utf8',
      // busboy reports `limit` on reaching fileSize, so +1 lets a file of exactly maxBytes through.
      limits: {
        files: 1,
        fileSize: opts.maxBytes + 1,
        fields: 4,
        parts: 6,
        fieldSize: 1024,
        fieldNameSize: 100,
      },
    })
  } catch {
    throw badRequest('invalid_multipart', 'The multipart body is malformed (missing boundary?)')
  }

  let failure: AppError | null = null
  // Settles on the first failure, so no wait below (drain, parse end, disk write) can outlive it.
  let signalFailure = () => {}
  const failed = new Promise<void>((resolve) => {
    signalFailure = resolve
  })
  const fail = (e: AppError) => {
    failure ??= e
    signalFailure()
  }
  let purpose: string | undefined
  let file: { filename: string; bytes: number; written?: Promise<void> } | undefined

  bb.on('file', (name, stream, info) => {
    if (name !== 'file' || file) {
      stream.resume()
      return fail(
        name !== 'file'
          ? badRequest('unknown_field', `Unknown field '${name}'`, name)
          : badRequest('invalid_value', 'Send exactly one file', 'file'),
      )
    }
    file = { filename: safeFilename(info.filename), bytes: 0 }
    if (!file.filename.toLowerCase().endsWith('.jsonl')) {
      stream.resume()
      return fail(badRequest('invalid_file_type', 'Only .jsonl files are accepted', 'file'))
    }
    const entry = file
    stream.on('data', (chunk: Buffer) => {
      entry.bytes += chunk.length
    })
    stream.on('limit', () => fail(fileTooLarge(opts.maxBytes)))
    entry.written = pipeline(stream, createWriteStream(opts.tmpPath, { flags: 'wx', mode: 0o600 }))
    entry.written.catch(() => fail(badRequest('upload_failed', 'The file could not be stored', 'file')))
  })
  bb.on('field', (name, value, info) => {
    if (name === 'purpose' && !info.valueTruncated) purpose = value
    else if (name === 'purpose')
      fail(badRequest('invalid_value', "Invalid field 'purpose': must be batch", 'purpose'))
    else if (name === 'file') fail(badRequest('invalid_value', "Field 'file' must be a file upload", 'file'))
    else fail(badRequest('unknown_field', `Unknown field '${name}'`, name))
  })
  for (const limit of ['partsLimit', 'filesLimit', 'fieldsLimit'] as const) {
    bb.on(limit, () => fail(badRequest('invalid_multipart', 'Too many parts in the form')))
  }
  const parsed = new Promise<void>((resolve) => {
    bb.on('close', resolve)
    bb.on('error', () => {
      fail(badRequest('invalid_multipart', 'The multipart body is malformed'))
      resolve()
    })
  })

  const reader = input.body.getReader()
  let bodyRead = false
  try {
    for (;;) {
      if (failure) break
      const { done, value } = await reader.read()
      if (done) {
        bodyRead = true
        bb.end()
        break
      }
      if (!bb.write(value)) await Promise.race([new Promise((resolve) => bb.once('drain', resolve)), failed])
    }
    if (!failure) await Promise.race([parsed, failed])
    if (!failure && file?.written) await Promise.race([file.written.catch(() => {}), failed])
  } catch {
    fail(badRequest('upload_aborted', 'The upload was interrupted'))
  }

  if (!failure) {
    if (!file) failure = badRequest('missing_field', "Missing required field 'file'", 'file')
    else if (purpose === undefined)
      failure = badRequest('missing_field', "Missing required field 'purpose'", 'purpose')
    else if (purpose !== 'batch') {
      failure = badRequest('invalid_value', "Invalid field 'purpose': must be batch", 'purpose')
    } else if (file.bytes === 0) failure = badRequest('empty_file', 'The file is empty', 'file')
  }
  if (failure) {
    reader.cancel().catch(() => {})
    bb.destroy()
    await file?.written?.catch(() => {})
    await rm(opts.tmpPath, { force: true })
    throw bodyRead ? failure : closing(failure)
  }
  return { filename: file!.filename, purpose: 'batch', bytes: file!.bytes }
}

/**
 * The same error, answered with `Connection: close`: the rest of the body is never read, so the
 * connection cannot carry another request, and a graceful shutdown must not wait for a client
 * still pushing an upload nobody reads.
 */
const closing = (e: AppError) =>
  new AppError(e.status, e.errorCode, e.message, e.param, { ...e.headers, connection: 'close' })

const fileTooLarge = (max: number) => tooLarge('file_too_large', `Files are limited to ${max} bytes`)
