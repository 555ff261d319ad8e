import { and, desc, eq, type SQL } from 'drizzle-orm'
import type { PgColumn, PgTable } from 'drizzle-orm/pg-core'
import { afterCursor, type PageParams, pageOf, pageWindow, type RowsPage } from '../../lib/pagination'
import type { PgDb } from './db'

// docs/api.md §0 lists on PostgreSQL: the cursor rule of lib/pagination.ts applied, as
// src/store/sqlite/page.ts applies it on SQLite.

type Pageable = PgTable & { seq: PgColumn; id: PgColumn }

/**
 * One page of any listing newest first by `seq`: `cursorRow(id)` finds the cursor row inside the
 * caller's own filter; `rows(after, n)` reads the first `n` rows of that filter and `after`.
 */
export async function pageBy<R>(
  query: PageParams,
  seq: PgColumn,
  cursorRow: (id: string) => Promise<{ seq: number }[]>,
  rows: (after: SQL | undefined, n: number) => Promise<R[]>,
): Promise<RowsPage<R>> {
  const window = pageWindow(query)
  const after = window.after === undefined ? undefined : afterCursor(seq, (await cursorRow(window.after))[0])
  return pageOf(await rows(after, window.limit + 1), window)
}

/** One page of a table's rows within `where`. */
export function pageRows<R>(
  db: PgDb,
  table: Pageable,
  where: SQL | undefined,
  query: PageParams,
): Promise<RowsPage<R>> {
  return pageBy(
    query,
    table.seq,
    (id) =>
      db
        .select({ seq: table.seq })
        .from(table as PgTable)
        .where(and(where, eq(table.id, id))) as Promise<{ seq: number }[]>,
    (after, n) =>
      db
        .select()
        .from(table as PgTable)
        .where(and(where, after))
        .orderBy(desc(table.seq))
        .limit(n) as unknown as Promise<R[]>,
  )
}
