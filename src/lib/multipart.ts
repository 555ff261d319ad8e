import busboy from 'busboy'
import { AppError, badRequest } from './errors'
import { log } from './logger'

// The one multipart receiver, for the two routes that take a file (docs/api.md §5 POST /v1/files,
// docs/api.md §7 POST /workers/upload-results). busboy parses the parts as the bytes arrive and the
// file part goes to `onFile` with backpressure, so memory does not grow with the file (Bun's
// formData() and Elysia's t.File() buffer the whole body); chunked bodies without Content-Length
// work the same way. Every limit is an answer, never a silent drop: an unknown, repeated,
// oversized or surplus field is a 400, a file over its cap a 413 while streaming. On a failure
// the request body is no longer read (the client still receives the answer, with
// `Connection: close`), and the caller is told before anything is published.

/** Room for the multipart framing and the small text fields around the file itself. */
export const FORM_OVERHEAD_BYTES = 64 * 1024
const MAX_FIELD_NAME_BYTES = 100

export interface MultipartInput {
  contentType: string | null
  contentLength: string | null
  body: ReadableStream<Uint8Array> | null
}

export interface MultipartRules {
  /** The text fields accepted, each at most once. */
  fields: readonly string[]
  /** Longest accepted text field value, in bytes. */
  maxFieldBytes: number
  /** The name of the one file part, and its cap in bytes. */
  file: { name: string; maxBytes: number }
  /** 413 for a file over the cap. */
  tooLarge: AppError
  /** The 400 message for a body that is not multipart/form-data. */
  contentTypeHint: string
  /**
   * Receives the file part as it streams, with the fields that came before it. It consumes the
   * stream (or throws, which fails the upload). It must not publish anything: the receiver may
   * still fail after it returns (a field after the file, the end of the body).
   */
  onFile(
    stream: AsyncIterable<Uint8Array>,
    info: { filename: string | undefined },
    fieldsSoFar: Readonly<Record<string, string>>,
  ): Promise<void>
}

/** The text fields, once the whole body has been read and the file consumed. */
export type ReceivedFields = Record<string, string>

/** Reads the form; throws the AppError that answers it (400/413) on any failure. */
export async function receiveMultipart(
  input: MultipartInput,
  rules: MultipartRules,
): Promise<ReceivedFields> {
  const type = input.contentType ?? ''
  if (!/^multipart\/form-data\s*;/i.test(type)) {
    input.body?.cancel().catch(() => {})
    throw badRequest('invalid_content_type', rules.contentTypeHint)
  }
  const declared = Number(input.contentLength ?? Number.NaN)
  if (Number.isFinite(declared) && declared > rules.file.maxBytes + FORM_OVERHEAD_BYTES) {
    input.body?.cancel().catch(() => {})
    throw closing(rules.tooLarge)
  }
  const fileName = rules.file.name
  if (!input.body) throw badRequest('missing_field', `Missing required field '${fileName}'`, fileName)

  let bb: busboy.Busboy
  try {
    bb = busboy({
      headers: { 'content-type': type },
      defParamCharset: 'utf8',
      // busboy reports `limit` on reaching fileSize, so +1 lets a file of exactly maxBytes through.
      // One more field and part than allowed, so a surplus one is seen (and refused), not dropped.
      limits: {
        files: 1,
        fileSize: rules.file.maxBytes + 1,
        fields: rules.fields.length + 1,
        parts: rules.fields.length + 2,
        fieldSize: rules.maxFieldBytes,
        fieldNameSize: MAX_FIELD_NAME_BYTES,
      },
    })
  } catch {
    throw badRequest('invalid_multipart', 'The multipart body is malformed (missing boundary?)')
  }

  let failure: AppError | null = null
  // Settles on the first failure, so no wait below (drain, parse end, the file's consumer) can outlive it.
  let signalFailure = () => {}
  const failed = new Promise<void>((resolve) => {
    signalFailure = resolve
  })
  const fail = (e: AppError) => {
    failure ??= e
    signalFailure()
  }
  const fields: ReceivedFields = {}
  let consumed: Promise<void> | undefined

  bb.on('file', (name, stream, info) => {
    // A part still streaming when the form is refused is destroyed with busboy's "Unexpected end of
    // file": the failure is already the answer, and an error event nobody hears would be thrown
    // out of the request, taking the server down.
    stream.on('error', () => {})
    if (name !== fileName || consumed) {
      stream.resume()
      return fail(
        name !== fileName
          ? badRequest('unknown_field', `Unknown field '${name}'`, name)
          : badRequest('invalid_value', `Send exactly one file in '${fileName}'`, fileName),
      )
    }
    stream.on('limit', () => fail(rules.tooLarge))
    consumed = rules.onFile(stream, { filename: info.filename }, { ...fields }).catch((e) => {
      stream.resume()
      if (!(e instanceof AppError)) log.error('a file part could not be stored', { error: e })
      fail(e instanceof AppError ? e : badRequest('upload_failed', 'The file could not be stored', fileName))
    })
  })
  bb.on('field', (name, value, info) => {
    if (info.nameTruncated) return fail(badRequest('invalid_multipart', 'A field name is too long'))
    if (name === fileName)
      return fail(badRequest('invalid_value', `Field '${fileName}' must be a file upload`, fileName))
    if (!rules.fields.includes(name))
      return fail(badRequest('unknown_field', `Unknown field '${name}'`, name))
    if (Object.hasOwn(fields, name))
      return fail(badRequest('invalid_value', `Field '${name}' is sent more than once`, name))
    if (info.valueTruncated) {
      return fail(
        badRequest('invalid_value', `Field '${name}' is longer than ${rules.maxFieldBytes} bytes`, name),
      )
    }
    fields[name] = value
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
    if (!failure && consumed) await Promise.race([consumed, failed])
  } catch {
    fail(badRequest('upload_aborted', 'The upload was interrupted'))
  }
  if (!failure && !consumed)
    failure = badRequest('missing_field', `Missing required field '${fileName}'`, fileName)
  if (failure) {
    reader.cancel().catch(() => {})
    bb.destroy()
    // The consumer has stopped (its stream ended or errored) before the caller cleans up.
    await consumed
    throw bodyRead ? failure : closing(failure)
  }
  return fields
}

/**
 * Refuses a request before reading its body (decided up front: the disk is low, the quota is
 * full): the body is cancelled and the answer closes the connection. Returns the error to throw.
 */
export function refuseUnread(input: MultipartInput, e: AppError): AppError {
  input.body?.cancel().catch(() => {})
  return closing(e)
}

/**
 * The same error, answered with `Connection: close`: the rest of the body is never read, so the
 * connection cannot carry another request, and a graceful shutdown must not wait for a client
 * still pushing an upload nobody reads.
 */
const closing = (e: AppError) =>
  new AppError(e.status, e.errorCode, e.message, e.param, { ...e.headers, connection: 'close' })
