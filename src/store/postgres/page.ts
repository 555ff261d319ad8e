import { and, desc, eq, lt, type SQL } from 'drizzle-orm'
import type { PgColumn, PgTable } from 'drizzle-orm/pg-core'
import { badRequest } from '../../lib/errors'
import { type PageParams, parseLimit, type RowsPage } from '../../lib/pagination'
import type { PgDb } from './db'

// docs/api.md §0 lists on PostgreSQL, as lib/pagination.ts's pageRows on SQLite: newest first by `seq`,
// the cursor resolved inside the caller's own filter so an id it may not see is just invalid.

type Pageable = PgTable & { seq: PgColumn; id: PgColumn }

export async function pageRows<R>(
  db: PgDb,
  table: Pageable,
  where: SQL | undefined,
  query: PageParams,
): Promise<RowsPage<R>> {
  const limit = parseLimit(query.limit)
  let cursor: SQL | undefined
  if (query.after) {
    const [row] = (await db
      .select({ seq: table.seq })
      .from(table as PgTable)
      .where(and(where, eq(table.id, query.after)))) as { seq: number }[]
    if (!row) throw badRequest('invalid_cursor', 'Unknown cursor in "after"', 'after')
    cursor = lt(table.seq, row.seq)
  }
  const rows = (await db
    .select()
    .from(table as PgTable)
    .where(and(where, cursor))
    .orderBy(desc(table.seq))
    .limit(limit + 1)) as unknown as R[]
  return { rows: rows.slice(0, limit), has_more: rows.length > limit }
}
