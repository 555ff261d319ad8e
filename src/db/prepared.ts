import type { Db } from './open'

/**
 * Prepares a module's statements once per database and hands them out after (hot paths such as
 * auth, heartbeat and poll must not re-prepare per call). Keyed by the database, so the several
 * apps a test process builds never share statements.
 */
export function preparedOnce<T>(prepare: (db: Db) => T): (deps: { db: Db }) => T {
  const cache = new WeakMap<Db, T>()
  return ({ db }) => {
    let statements = cache.get(db)
    if (!statements) {
      statements = prepare(db)
      cache.set(db, statements)
    }
    return statements
  }
}
