import { basename } from 'node:path'
import { ClientError, EXIT } from './exit'

// The body of POST /v1/files (docs/api.md §5: multipart, `purpose=batch` then `file`), built by hand
// and streamed from disk: the file is never read whole (a 200 MB input must not cost 200 MB of
// memory, which a FormData holding it would), the length is known before the first byte, so the
// request carries a Content-Length (the server's size cap and quota are decided before it reads,
// docs/api.md §15), and every chunk is counted as it leaves, which drives the progress bar.

export interface MultipartUpload {
  body: ReadableStream<Uint8Array>
  headers: Record<string, string>
  /** Bytes of the whole body (framing included). */
  length: number
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(a.byteLength + b.byteLength)
  out.set(a)
  out.set(b, a.byteLength)
  return out
}

/** fetch rejects with the body's own error, so this reaches the user as it is (exit 3). */
const changed = (path: string, how: string) =>
  new ClientError(EXIT.invalid, `${path} ${how} while it was being uploaded; nothing was stored`, {
    file: path,
  })

/** The name the form gives the file: its base name, without what would break the header line. */
export function formFilename(path: string): string {
  return (
    basename(path)
      // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters cannot go in a header
      .replace(/[\u0000-\u001f\u007f]/g, '')
      .replaceAll('"', '%22')
  )
}

/**
 * A multipart body of the text `fields`, then the file at `path` (`size` bytes) as the part named
 * `file`. `onBytes` hears how many of the file's bytes have been handed to the connection.
 */
export function multipartUpload(
  path: string,
  size: number,
  fields: Record<string, string>,
  onBytes: (sent: number) => void,
): MultipartUpload {
  const boundary = `gridkeep-${crypto.randomUUID()}`
  const encoder = new TextEncoder()
  let text = ''
  for (const [name, value] of Object.entries(fields))
    text += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`
  text +=
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${formFilename(path)}"\r\n` +
    'Content-Type: application/jsonl\r\n\r\n'
  const head = encoder.encode(text)
  const tail = encoder.encode(`\r\n--${boundary}--\r\n`)
  type Chunk = Uint8Array<ArrayBuffer>
  let reader: { read(): Promise<{ done: boolean; value?: Chunk }>; cancel(): Promise<void> } | null = null
  // Each chunk goes out one read late, so that the form's head rides with the first chunk and its
  // tail with the last: a small write of its own at either end can wait for the peer's delayed ACK
  // (Nagle), a fixed ~40 ms that was a tenth of a 200 MB upload on loopback (bench/client.ts).
  let pending: Chunk = head
  let sent = 0
  let finished = false
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (finished) return controller.close()
      reader ??= Bun.file(path).stream().getReader()
      for (;;) {
        const { value, done } = await reader.read()
        if (done || !value) {
          if (sent !== size) throw changed(path, 'shrank')
          finished = true
          controller.enqueue(concat(pending, tail))
          onBytes(size)
          return
        }
        sent += value.byteLength
        // More than announced would break the Content-Length: the file changed under us.
        if (sent > size) throw changed(path, 'grew')
        if (pending === head) {
          pending = concat(head, value)
          continue
        }
        controller.enqueue(pending)
        onBytes(sent - value.byteLength)
        pending = value
        return
      }
    },
    cancel() {
      void reader?.cancel()
    },
  })
  return {
    body,
    length: head.byteLength + size + tail.byteLength,
    headers: {
      'content-type': `multipart/form-data; boundary=${boundary}`,
      'content-length': String(head.byteLength + size + tail.byteLength),
    },
  }
}
