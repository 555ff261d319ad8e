import { and, desc, eq, type SQL } from 'drizzle-orm'
import type { SQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core'
import type { Db } from '../../db/open'
import { afterCursor, type PageParams, pageOf, pageWindow, type RowsPage } from '../../lib/pagination'

// docs/api.md §0 lists on SQLite: the cursor rule of lib/pagination.ts applied, as
// src/store/postgres/page.ts applies it on PostgreSQL.

type Pageable = SQLiteTable & { seq: SQLiteColumn; id: SQLiteColumn }

/**
 * One page of any listing newest first by `seq`: `cursorRow(id)` finds the cursor row inside the
 * caller's own filter; `rows(after, n)` reads the first `n` rows of that filter and `after`.
 */
export function pageBy<R>(
  query: PageParams,
  seq: SQLiteColumn,
  cursorRow: (id: string) => { seq: number } | undefined,
  rows: (after: SQL | undefined, n: number) => R[],
): RowsPage<R> {
  const window = pageWindow(query)
  const after = window.after === undefined ? undefined : afterCursor(seq, cursorRow(window.after))
  return pageOf(rows(after, window.limit + 1), window)
}

/** One page of a table's rows within `where`. */
export function pageRows<R extends { id: string }>(
  db: Db,
  table: Pageable,
  where: SQL | undefined,
  query: PageParams,
): RowsPage<R> {
  return pageBy(
    query,
    table.seq,
    (id) =>
      db
        .select({ seq: table.seq })
        .from(table as SQLiteTable)
        .where(and(where, eq(table.id, id)))
        .get() as { seq: number } | undefined,
    (after, n) =>
      db
        .select()
        .from(table as SQLiteTable)
        .where(and(where, after))
        .orderBy(desc(table.seq))
        .limit(n)
        .all() as unknown as R[],
  )
}
