// How PostgreSQL reports what the engines map to the same AppError the SQLite path gives.

/** PostgreSQL's unique_violation (SQLSTATE 23505), wherever the driver or drizzle put it. */
export function isUniqueViolation(error: unknown): boolean {
  for (let e = error as { errno?: unknown; code?: unknown; cause?: unknown } | undefined; e; ) {
    if (e.errno === '23505' || e.code === '23505') return true
    e = e.cause as typeof e
  }
  return false
}
