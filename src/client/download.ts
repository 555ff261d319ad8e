import { renameSync, rmSync, writeFileSync } from 'node:fs'
import type { Api } from './api'
import { ClientError, EXIT } from './exit'

// Files from the server onto disk (GET /v1/files/{id}/content, docs/api.md §5): streamed, never held
// in memory; shared by following a batch (follow.ts) and writing its results in the input's order
// (reorder.ts).

/** A response body's chunks; a connection that breaks is a transport failure (or Ctrl-C). */
export async function* readBody(api: Api, res: Response): AsyncGenerator<Uint8Array> {
  try {
    for await (const chunk of res.body ?? []) yield chunk
  } catch (e) {
    throw api.transportFailure(e)
  }
}

/** Streams a file's content to `path` (through `path.part`, renamed when whole), or to stdout for `-`. */
export async function download(api: Api, fileId: string | null, path: string): Promise<number> {
  if (fileId === null) {
    if (path !== '-') await Bun.write(path, '')
    return 0
  }
  const res = await api.send('GET', `/v1/files/${encodeURIComponent(fileId)}/content`, { untimed: true })
  const partial = `${path}.part`
  let bytes = 0
  if (path === '-') {
    for await (const chunk of readBody(api, res)) {
      bytes += chunk.byteLength
      process.stdout.write(chunk)
    }
    return bytes
  }
  const cannotWrite = (e: unknown) =>
    new ClientError(EXIT.invalid, `cannot write ${path}: ${(e as Error).message}`, { file: path })
  let sink: ReturnType<ReturnType<typeof Bun.file>['writer']>
  try {
    // A FileSink writes over an existing file without truncating it: start from an empty one.
    writeFileSync(partial, '')
    sink = Bun.file(partial).writer({ highWaterMark: 1 << 20 })
  } catch (e) {
    throw cannotWrite(e)
  }
  try {
    for await (const chunk of readBody(api, res)) {
      bytes += chunk.byteLength
      try {
        sink.write(chunk)
      } catch (e) {
        throw cannotWrite(e)
      }
    }
    try {
      await sink.end()
      renameSync(partial, path)
    } catch (e) {
      throw cannotWrite(e)
    }
  } catch (e) {
    await Promise.resolve(sink.end()).catch(() => {})
    rmSync(partial, { force: true })
    throw e
  }
  return bytes
}
