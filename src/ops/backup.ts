import { Database } from 'bun:sqlite'
import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  linkSync,
  openSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs'
import { resolve } from 'node:path'

// `gridkeep backup <path>` (docs/operations.md "Backups and restore"): a consistent copy of the live database, taken while the server
// runs. VACUUM INTO reads inside one read transaction, so in WAL mode it sees a single snapshot and
// never blocks the server's writers; the copy is compact and self-contained (no -wal beside it).
// It is written to a temporary file, checked, synced, and only then put in place, so `path` is
// either absent or a complete backup.

export class BackupError extends Error {}

export interface BackupResult {
  path: string
  bytes: number
}

export function backupDatabase(databasePath: string, target: string, opts: { force?: boolean } = {}) {
  if (databasePath === ':memory:' || !existsSync(databasePath)) {
    throw new BackupError(`no database at ${databasePath} (set DATABASE_PATH or DATA_DIR)`)
  }
  const path = resolve(target)
  if (path === resolve(databasePath)) throw new BackupError('the backup path is the database itself')
  if (existsSync(path)) {
    if (statSync(path).isDirectory()) throw new BackupError(`${path} is a directory; name the backup file`)
    if (!opts.force) throw new BackupError(`${path} already exists (use --force to overwrite it)`)
  }
  const partial = `${path}.partial-${process.pid}`
  rmSync(partial, { force: true })
  try {
    const source = new Database(databasePath, { readonly: true })
    try {
      source.exec('PRAGMA busy_timeout = 5000')
      source.query('VACUUM INTO ?').run(partial)
    } finally {
      source.close()
    }
    verify(partial)
    // The copy holds password and key hashes: readable by the owner only.
    chmodSync(partial, 0o600)
    const fd = openSync(partial, 'r+')
    try {
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
    if (opts.force) renameSync(partial, path)
    else {
      // link() fails if the path appeared meanwhile: never overwrite without --force.
      linkSync(partial, path)
      rmSync(partial)
    }
  } catch (error) {
    rmSync(partial, { force: true })
    if (error instanceof BackupError) throw error
    if ((error as { code?: string }).code === 'EEXIST') {
      throw new BackupError(`${path} already exists (use --force to overwrite it)`)
    }
    throw new BackupError(`backup failed: ${(error as Error).message}`)
  }
  return { path, bytes: statSync(path).size } satisfies BackupResult
}

function verify(file: string) {
  const copy = new Database(file, { readonly: true })
  try {
    const result = copy.query('PRAGMA quick_check').values()
    if (result.length !== 1 || result[0]![0] !== 'ok') {
      throw new BackupError(`the copy failed its integrity check: ${String(result[0]?.[0])}`)
    }
  } finally {
    copy.close()
  }
}

/** 1536 → "1.5 KiB". */
export function formatBytes(n: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB']
  let v = n
  let i = 0
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024
    i++
  }
  return i === 0 ? `${n} bytes` : `${v.toFixed(1)} ${units[i]}`
}
