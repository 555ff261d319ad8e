import { type Column, lt, type SQL } from 'drizzle-orm'
import { t as T } from 'elysia'
import { badRequest } from './errors'

// Lists (docs/api.md §0): newest first, `limit` 1–100 (default 20), cursor `after` = last id of the
// previous page. The cursor is resolved inside the caller's own visibility filter, so an id the
// caller may not see is just an invalid cursor: existence never leaks. The rule is decided here
// once (pageWindow, afterCursor, pageOf); each engine's pager applies it (src/store/*/page.ts).

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

/** A page to read (docs/api.md §0): its size, and the cursor, if any, to resolve first. */
export interface PageWindow {
  limit: number
  after: string | undefined
}

/** The page a query asks for; an out-of-range `limit` is refused here. */
export function pageWindow(query: PageParams): PageWindow {
  return { limit: parseLimit(query.limit), after: query.after || undefined }
}

/**
 * The rows after the cursor row, newest first: `seq` below its seq. `at` is the cursor row as the
 * caller's own filter found it; none means the cursor is invalid (docs/api.md §0: an id the caller
 * may not see is just an invalid cursor, existence never leaks).
 */
export function afterCursor(seq: Column, at: { seq: number } | undefined): SQL {
  if (!at) throw unknownCursor()
  return lt(seq, at.seq)
}

/** docs/api.md §0: a cursor that names no row the caller may list. */
export const unknownCursor = () => badRequest('invalid_cursor', 'Unknown cursor in "after"', 'after')

/**
 * A page of a list already in memory in its own order (a split batch's shards, docs/api.md §16):
 * the rows after the cursor row, the same window and has_more as the engines' pagers.
 */
export function pageInMemory<R extends { id: string }>(rows: R[], query: PageParams): RowsPage<R> {
  const window = pageWindow(query)
  let from = 0
  if (window.after !== undefined) {
    from = rows.findIndex((r) => r.id === window.after) + 1
    if (from === 0) throw unknownCursor()
  }
  return pageOf(rows.slice(from, from + window.limit + 1), window)
}

/** The page of `rows`, read newest first with a limit of one more than the page (has_more). */
export function pageOf<R>(rows: R[], window: PageWindow): RowsPage<R> {
  return { rows: rows.slice(0, window.limit), has_more: rows.length > window.limit }
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
