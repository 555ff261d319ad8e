import type { Db } from './open'

export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0]

type NotPromise<T> = T extends PromiseLike<unknown> ? never : T

/**
 * Runs `fn` in one `BEGIN IMMEDIATE` transaction: the write lock is taken first, so a
 * read-modify-write can never be interleaved with another writer (ARCHITECTURE.md rule 8).
 *
 * `fn` must be synchronous: bun:sqlite commits at the first `await`, so a throw after it would not
 * roll back. The type refuses a Promise-returning callback, and at run time a thenable result
 * rolls the transaction back and throws. No network or file I/O inside; do it after commit.
 */
export function writeTx<T>(db: Db, fn: (tx: Tx) => NotPromise<T>): T {
  return db.transaction(
    (tx) => {
      const result = fn(tx)
      if (result && typeof (result as { then?: unknown }).then === 'function') {
        throw new TypeError('writeTx callback must be synchronous (it returned a Promise)')
      }
      return result
    },
    { behavior: 'immediate' },
  ) as T
}
