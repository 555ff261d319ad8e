import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs'
import { type FileHandle, open, readdir, rename, rm, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { insufficientStorage, isNoSpace } from '../disk'
import { type BlobStore, type BlobWriter, checkKey, SCRATCH_PREFIX } from './store'

// The default engine: DATA_DIR/files/<key>, as before the seam. A blob is written to
// `<key>.part` and renamed into place on publish, so a reader never sees a partial file. A disk
// that fills during a write (ENOSPC) is the 507 of docs/api.md §15; abort() then removes the `.part`.
// Every descriptor is closed before the operation that used it resolves: publish() renames a closed
// file (a reader on another NFS client is only sure of the bytes after the writer's close), and a
// read stream closes its file before it ends. A descriptor closed later, in the background, keeps
// the filesystem busy (it cannot be unmounted) and an unlinked file's space taken meanwhile.

const PART = '.part'
/** The size of a read stream's chunks. */
const READ_CHUNK_BYTES = 256 * 1024

export class LocalBlobStore implements BlobStore {
  readonly engine = 'local' as const
  constructor(readonly root: string) {}

  private pathOf(key: string) {
    return join(this.root, checkKey(key))
  }

  localPath(key: string) {
    return this.pathOf(key)
  }

  create(key: string): BlobWriter {
    const path = this.pathOf(key)
    const part = path + PART
    mkdirSync(dirname(path), { recursive: true })
    const out: WriteStream = createWriteStream(part, { flags: 'wx', mode: 0o600 })
    let failure: Error | null = null
    out.on('error', (e) => {
      failure ??= e
    })
    let published = false
    return {
      async write(chunk) {
        if (failure) throw noSpaceAsAppError(failure)
        if (!out.write(chunk)) {
          await new Promise<void>((resolve, reject) => {
            const done = () => {
              out.off('drain', done)
              out.off('error', fail)
              resolve()
            }
            const fail = (e: Error) => {
              out.off('drain', done)
              reject(noSpaceAsAppError(e))
            }
            out.once('drain', done)
            out.once('error', fail)
          })
        }
      },
      async publish() {
        // 'close', not 'finish': the descriptor is closed after the last write, in the background.
        await new Promise<void>((resolve, reject) => {
          if (failure) return reject(noSpaceAsAppError(failure))
          out.once('error', (e) => reject(noSpaceAsAppError(e)))
          out.once('close', () => (failure ? reject(noSpaceAsAppError(failure)) : resolve()))
          out.end()
        })
        await rename(part, path)
        published = true
        return out.bytesWritten
      },
      async abort() {
        // The file is opened asynchronously: wait until the stream is closed, so the `.part`
        // cannot be created after it is removed.
        await new Promise<void>((resolve) => {
          if (out.closed) return resolve()
          out.once('close', () => resolve())
          out.destroy()
        })
        await rm(part, { force: true })
        if (published) await rm(path, { force: true })
      },
    }
  }

  async read(key: string) {
    return fileStream(this.pathOf(key), 0, null)
  }

  async readRange(key: string, start: number, end: number | null) {
    return fileStream(this.pathOf(key), start, end)
  }

  async body(key: string) {
    const file = Bun.file(this.pathOf(key))
    return (await file.exists()) ? file : null
  }

  async size(key: string) {
    try {
      return (await stat(this.pathOf(key))).size
    } catch {
      return null
    }
  }

  async remove(key: string) {
    // A writer that died mid-write left its `.part`: removing the key removes that too.
    const path = this.pathOf(key)
    await rm(path + PART, { force: true })
    await rm(path, { force: true })
  }

  async *list(prefix: string) {
    const dir = prefix.startsWith(SCRATCH_PREFIX) ? SCRATCH_PREFIX : ''
    let names: string[]
    try {
      names = await readdir(join(this.root, dir))
    } catch {
      return
    }
    for (const name of names) {
      const key = dir + name
      if (key.startsWith(prefix) && !name.endsWith(PART) && name !== 'tmp') yield key
    }
  }

  async prepare() {
    mkdirSync(join(this.root, SCRATCH_PREFIX), { recursive: true })
    // docs/scale-out.md ("like `.part` files on local disk"): `.part` files and scratch files left by a crash mid-upload.
    let removed = 0
    for (const dir of ['', SCRATCH_PREFIX]) {
      for (const name of await readdir(join(this.root, dir))) {
        if (name.endsWith(PART) || dir === SCRATCH_PREFIX) {
          await rm(join(this.root, dir, name), { force: true })
          removed++
        }
      }
    }
    return removed
  }
}

const noSpaceAsAppError = (e: Error) => (isNoSpace(e) ? insufficientStorage() : e)

/**
 * The bytes of `path` from `start` to `end` (exclusive; null: its end), or null when there is no
 * such file. The file is closed before the stream ends (Bun.file().stream() closes it afterwards,
 * in the background), when the stream is cancelled, and when a read fails.
 */
async function fileStream(path: string, start: number, end: number | null) {
  let file: FileHandle
  try {
    file = await open(path, 'r')
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw e
  }
  let at = start
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      try {
        const want = end === null ? READ_CHUNK_BYTES : Math.min(READ_CHUNK_BYTES, end - at)
        const got = want > 0 ? await file.read(new Uint8Array(want), 0, want, at) : null
        if (!got || got.bytesRead === 0) {
          await file.close()
          c.close()
          return
        }
        at += got.bytesRead
        c.enqueue(got.bytesRead === want ? got.buffer : got.buffer.subarray(0, got.bytesRead))
      } catch (e) {
        await file.close().catch(() => {})
        throw e
      }
    },
    cancel: () => file.close(),
  })
}
