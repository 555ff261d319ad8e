import { and, desc, eq, lt, type SQL } from 'drizzle-orm'
import type { SQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core'
import { t as T } from 'elysia'
import type { Db } from '../db/open'
import { badRequest } from './errors'

// Lists (docs/api.md §0): newest first, `limit` 1–100 (default 20), cursor `after` = last id of the
// previous page. The cursor is resolved inside the caller's own visibility filter, so an id the
// caller may not see is just an invalid cursor: existence never leaks.

// `limit` is taken as a string and parsed here: Elysia's coerced integers lose the parameter's name
// when they fail a bound, and the envelope must name it.
export const PageQuery = {
  limit: T.Optional(
    T.String({
      maxLength: 8,
      pattern: '^[0-9]+$',
      description: 'Page size, an integer from 1 to 100 (default 20)',
    }),
  ),
  after: T.Optional(T.String({ maxLength: 128, description: 'Cursor: the last id of the previous page' })),
}

export interface Page<T> {
  object: 'list'
  data: T[]
  first_id: string | null
  last_id: string | null
  has_more: boolean
}

type Pageable = SQLiteTable & { seq: SQLiteColumn; id: SQLiteColumn }

export interface PageParams {
  limit?: string | number
  after?: string
}

/** One page of rows as a store returns it, before the list envelope. */
export interface RowsPage<R> {
  rows: R[]
  has_more: boolean
}

export function parseLimit(raw: string | number | undefined): number {
  if (raw === undefined) return 20
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > 100) {
    throw badRequest(
      'invalid_value',
      "Invalid query parameter 'limit': must be an integer from 1 to 100",
      'limit',
    )
  }
  return n
}

export function pageRows<R extends { id: string }>(
  db: Db,
  table: Pageable,
  where: SQL | undefined,
  query: PageParams,
): RowsPage<R> {
  const limit = parseLimit(query.limit)
  let cursor: SQL | undefined
  if (query.after) {
    const row = db
      .select({ seq: table.seq })
      .from(table as SQLiteTable)
      .where(and(where, eq(table.id, query.after)))
      .get() as { seq: number } | undefined
    if (!row) throw badRequest('invalid_cursor', 'Unknown cursor in "after"', 'after')
    cursor = lt(table.seq, row.seq)
  }
  const rows = db
    .select()
    .from(table as SQLiteTable)
    .where(and(where, cursor))
    .orderBy(desc(table.seq))
    .limit(limit + 1)
    .all() as unknown as R[]
  return { rows: rows.slice(0, limit), has_more: rows.length > limit }
}

export function toPage<T extends { id: string }>(data: T[], has_more: boolean): Page<T> {
  return {
    object: 'list',
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more,
  }
}
