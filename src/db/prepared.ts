import { sql } from 'drizzle-orm'
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

/**
 * A prepared statement's values, each filled by the parameter of its own name (`same`) or of the
 * name `renamed` gives it (several columns written from one `now`).
 */
export function placeholders<
  const C extends string,
  const R extends Record<string, string> = Record<never, string>,
>(same: C[], renamed?: R): Record<C | keyof R, never> {
  const names = [...same.map((c) => [c, c]), ...Object.entries(renamed ?? {})]
  return Object.fromEntries(
    names.map(([column, name]) => [column, sql.placeholder(name!) as never]),
  ) as Record<C | keyof R, never>
}
