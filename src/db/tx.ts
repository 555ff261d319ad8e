import type { Db } from './open'
import { preparedOnce } from './prepared'

export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0]

type NotPromise<T> = T extends PromiseLike<unknown> ? never : T

const statements = preparedOnce((db: Db) => ({
  begin: db.$client.prepare('BEGIN IMMEDIATE'),
  commit: db.$client.prepare('COMMIT'),
  rollback: db.$client.prepare('ROLLBACK'),
}))

function synchronous<T>(result: T): T {
  if (result && typeof (result as { then?: unknown }).then === 'function') {
    throw new TypeError('writeTx callback must be synchronous (it returned a Promise)')
  }
  return result
}

/**
 * Runs `fn` in one `BEGIN IMMEDIATE` transaction: the write lock is taken first, so a
 * read-modify-write can never be interleaved with another writer (ARCHITECTURE.md rule 8).
 *
 * `fn` must be synchronous: bun:sqlite commits at the first `await`, so a throw after it would not
 * roll back. The type refuses a Promise-returning callback, and at run time a thenable result
 * rolls the transaction back and throws. No network or file I/O inside; do it after commit.
 *
 * The transaction is three prepared statements on the one connection, and `tx` is the database
 * itself, whose statements run inside it: building drizzle's transaction object for every write
 * cost more than a claim's own statements (the poll's hot path). Nested in another transaction it
 * is a savepoint, as drizzle's own; nothing calls `tx.rollback()` (throw instead).
 */
export function writeTx<T>(db: Db, fn: (tx: Tx) => NotPromise<T>): T {
  if (db.$client.inTransaction) {
    return db.transaction((tx) => synchronous(fn(tx)), { behavior: 'immediate' }) as T
  }
  const s = statements({ db })
  s.begin.run()
  try {
    const result = synchronous(fn(db as unknown as Tx))
    s.commit.run()
    return result
  } catch (e) {
    if (db.$client.inTransaction) s.rollback.run()
    throw e
  }
}
