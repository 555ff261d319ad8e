import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../../config'

// Where file bytes live (API.md §5): DATA_DIR/files/<id>, for uploads, outputs and error files
// alike. The client's filename is metadata only and never reaches a path.

const FILE_ID = /^file-[0-9A-Za-z]{1,64}$/

export const filesDir = (config: Pick<Config, 'DATA_DIR'>) => join(config.DATA_DIR, 'files')

/** The path of a file's bytes. Refuses anything but a file id, so no input can name another path. */
export function filePath(config: Pick<Config, 'DATA_DIR'>, fileId: string): string {
  if (!FILE_ID.test(fileId)) throw new Error(`not a file id: ${JSON.stringify(fileId.slice(0, 80))}`)
  return join(filesDir(config), fileId)
}

/** A temporary path beside the final one: bytes are written there and renamed on success. */
export const partialPath = (config: Pick<Config, 'DATA_DIR'>, fileId: string) =>
  `${filePath(config, fileId)}.part`

export function ensureFilesDir(config: Pick<Config, 'DATA_DIR'>) {
  mkdirSync(filesDir(config), { recursive: true })
}
