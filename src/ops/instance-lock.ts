import { Database } from 'bun:sqlite'
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'

// One server per database file (docs/deployment.md "The single binary"). Two servers on one SQLite file would each run the
// sweeper, the validator and the claim logic as if alone; SQLite would keep the file intact, but
// not the rules built on it.
//
// The lock is an open EXCLUSIVE transaction on a small side database, `<DATABASE_PATH>.lock`.
// SQLite takes it with POSIX advisory locks, which the kernel drops when the process ends in any
// way, SIGKILL and power loss included: there is never a stale lock to clean up, no PID to trust
// (PIDs repeat, and every container's server is PID 1), no heartbeat to wait out. SQLite also tracks
// these locks per file inside one process, so a second server in the same process is refused too.
// The main database is untouched, so `gridkeep backup` and other readers work while it is held.
// Keep DATA_DIR on a local disk: advisory locks over network filesystems are unreliable.

export class InstanceLockedError extends Error {}

export interface InstanceLock {
  /** The lock file, for messages. */
  readonly path: string
  /** Idempotent. */
  release(): void
}

export const lockPathFor = (databasePath: string) => `${databasePath}.lock`

/** Takes the lock or throws InstanceLockedError at once (no waiting). */
export function acquireInstanceLock(databasePath: string): InstanceLock {
  if (databasePath === ':memory:') return { path: ':memory:', release() {} }
  const path = lockPathFor(databasePath)
  mkdirSync(dirname(path), { recursive: true })
  const lockDb = new Database(path, { create: true })
  try {
    lockDb.exec('PRAGMA busy_timeout = 0')
    lockDb.exec('BEGIN EXCLUSIVE')
  } catch (error) {
    lockDb.close()
    if ((error as { code?: string }).code?.startsWith('SQLITE_BUSY')) {
      throw new InstanceLockedError(
        `another gridkeep server is already running on ${databasePath} (lock ${path}); ` +
          'stop it first, or point DATABASE_PATH at another file',
      )
    }
    throw error
  }
  let held = true
  return {
    path,
    release() {
      if (!held) return
      held = false
      lockDb.exec('ROLLBACK')
      lockDb.close()
    },
  }
}
