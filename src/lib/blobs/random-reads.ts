import { closeSync, mkdtempSync, openSync, readSync, rmSync, unlinkSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

// Synchronous random reads of a blob while it is streamed once, front to back: the custom_id
// set (src/lib/id-set.ts) confirms a hash match by re-reading an earlier line, in the middle of a
// synchronous check. On local disk that is the file itself. For a remote engine the bytes
// streamed so far are appended to a temporary file, unlinked at once (a crash leaves nothing).

export class StreamedReads {
  private fd: number | undefined
  private readonly copy: boolean

  /**
   * `localPath`: the blob's own file when the engine has one (BlobStore.localPath), else null.
   * `base`: where in that file the stream starts (a range read: docs/api.md §16 shards).
   */
  constructor(
    private readonly localPath: string | null,
    private readonly base = 0,
  ) {
    this.copy = localPath === null
    if (this.copy) {
      const dir = mkdtempSync(join(tmpdir(), 'gridkeep-reads-'))
      const path = join(dir, 'copy')
      this.fd = openSync(path, 'wx+', 0o600)
      unlinkSync(path)
      rmSync(dir, { recursive: true, force: true })
    }
  }

  /** The next chunk of the stream (kept only when there is no local file). */
  append(chunk: Uint8Array) {
    if (!this.copy) return
    let done = 0
    while (done < chunk.length) done += writeSync(this.fd!, chunk, done)
  }

  /** `length` bytes at `offset` of what was streamed, or null past the end. */
  readonly read = (offset: number, length: number): Uint8Array | null => {
    this.fd ??= openSync(this.localPath!, 'r')
    const buf = new Uint8Array(length)
    const at = this.copy ? offset : this.base + offset
    return readSync(this.fd, buf, 0, length, at) === length ? buf : null
  }

  close() {
    if (this.fd !== undefined) closeSync(this.fd)
    this.fd = undefined
  }
}
