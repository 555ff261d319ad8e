// How PostgreSQL reports what the engines map to the same AppError the SQLite path gives.

/** PostgreSQL's unique_violation (SQLSTATE 23505), wherever the driver or drizzle put it. */
export function isUniqueViolation(error: unknown): boolean {
  for (let e = error as { errno?: unknown; code?: unknown; cause?: unknown } | undefined; e; ) {
    if (e.errno === '23505' || e.code === '23505') return true
    e = e.cause as typeof e
  }
  return false
}

/** Whether a unique_violation was raised on `table` (which of a transaction's inserts collided). */
export function uniqueOn(error: unknown, table: string): boolean {
  for (
    let e = error as
      | { table?: unknown; table_name?: unknown; detail?: unknown; message?: unknown; cause?: unknown }
      | undefined;
    e;
  ) {
    if (e.table === table || e.table_name === table) return true
    if (typeof e.message === 'string' && e.message.includes(`"${table}`)) return true
    e = e.cause as typeof e
  }
  return false
}
