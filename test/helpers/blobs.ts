import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Server } from '../../src/compose'
import { rowsOf } from './rows'

// File bytes as the tests see them, through the blob store, so the same test runs on local disk
// and on S3 (GK_TEST_STORAGE=s3).

export async function readBlob(deps: Server, key: string): Promise<string | null> {
  const stream = await deps.blobs.read(key)
  return stream ? await new Response(stream).text() : null
}

export async function writeBlob(deps: Server, key: string, content: string | Uint8Array) {
  const w = deps.blobs.create(key)
  await w.write(typeof content === 'string' ? Buffer.from(content) : content)
  await w.publish()
}

export const blobExists = async (deps: Server, key: string) => (await deps.blobs.size(key)) !== null

/**
 * Everything the store holds, half-written leftovers included: on local disk every entry of
 * DATA_DIR/files and its tmp/ (so `.part` files show), on S3 every object under the prefix.
 */
export async function storedEverything(deps: Server): Promise<string[]> {
  if (deps.blobs.engine === 's3') return (await Array.fromAsync(deps.blobs.list(''))).sort()
  const root = join(deps.config.DATA_DIR, 'files')
  const ls = (dir: string) => {
    try {
      return readdirSync(join(root, dir)).map((n) => dir + n)
    } catch {
      return []
    }
  }
  return [...ls('').filter((n) => n !== 'tmp'), ...ls('tmp/')].sort()
}

/** Stored entries that are no recorded file: half-written leftovers, orphans. */
export async function strayBlobs(deps: Server): Promise<string[]> {
  const { db, tables } = rowsOf(deps)
  const known = new Set((await db.select({ id: tables.files.id }).from(tables.files)).map((r) => r.id))
  return (await storedEverything(deps)).filter((k) => !known.has(k))
}

/** Counts the bytes written into the store from now on (the event a partial upload waits for). */
export function countWrites(deps: Server): { bytes: number } {
  const seen = { bytes: 0 }
  const create = deps.blobs.create.bind(deps.blobs)
  deps.blobs.create = (key) => {
    const writer = create(key)
    return {
      ...writer,
      write: (chunk) => {
        seen.bytes += chunk.length
        return writer.write(chunk)
      },
    }
  }
  return seen
}
