import { and, desc, eq, lt, type SQL } from 'drizzle-orm'
import type { PgColumn, PgTable } from 'drizzle-orm/pg-core'
import { badRequest } from '../../lib/errors'
import { type PageParams, parseLimit } from '../../lib/pagination'
import type { PgDb, PgTx } from './db'

type Pageable = PgTable & { seq: PgColumn; id: PgColumn }

/** API.md §0 lists on PostgreSQL: the twin of pageRows in src/lib/pagination.ts. */
export async function pageRowsPg<R extends { id: string }>(
  db: PgDb | PgTx,
  table: Pageable,
  where: SQL | undefined,
  query: PageParams,
): Promise<{ rows: R[]; has_more: boolean }> {
  const limit = parseLimit(query.limit)
  let cursor: SQL | undefined
  if (query.after) {
    const [row] = await db
      .select({ seq: table.seq })
      .from(table as PgTable)
      .where(and(where, eq(table.id, query.after)))
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
