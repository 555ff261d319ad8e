import { and, asc, eq, inArray } from 'drizzle-orm'
import {
  type BatchErrorRow,
  type BatchRow,
  type BatchStatus,
  batchErrors,
  batches,
  files,
} from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { type PageParams, pageRows, toPage } from '../../lib/pagination'
import type { UserPrincipal } from '../auth/credentials'
import { type BatchCreate, type BatchObject, toBatchObject } from './model'

// Batches (SPEC §2–3, API.md §6). Creation only records the batch as `validating` and wakes the
// validator (src/services/validator.ts); every later status change goes through states.ts.

const isSuperadmin = (p: UserPrincipal) => p.user.platform_role === 'superadmin'

/** POST /v1/batches: returns at once with status `validating` (SPEC §3). */
export function createBatch(deps: Deps, principal: UserPrincipal, input: BatchCreate): BatchObject {
  const now = deps.clock.now()
  const row = writeTx(deps.db, (tx) => {
    // Read inside the write transaction: DELETE /v1/files cannot slip in between.
    const file = tx
      .select({ purpose: files.purpose })
      .from(files)
      .where(and(eq(files.id, input.input_file_id), eq(files.user_id, principal.user.id)))
      .get()
    if (!file) throw notFound('file_not_found', 'No such file', 'input_file_id')
    if (file.purpose !== 'batch') {
      throw badRequest('invalid_file_purpose', "The input file must have purpose 'batch'", 'input_file_id')
    }
    return tx
      .insert(batches)
      .values({
        id: newId('batch_'),
        user_id: principal.user.id,
        input_file_id: input.input_file_id,
        endpoint: input.endpoint ?? '/v1/chat/completions',
        completion_window: input.completion_window ?? '24h',
        status: 'validating',
        metadata: input.metadata ?? null,
        created_at: now,
        updated_at: now,
      })
      .returning()
      .get()
  })
  log.info('batch created', {
    batch_id: row.id,
    user_id: principal.user.id,
    input_file_id: row.input_file_id,
  })
  deps.batchEvents.created(row.id)
  return toBatchObject(row, [])
}

/** The stored errors of each batch, in line order. */
function errorsOf(deps: Deps, batchIds: string[]): Map<string, BatchErrorRow[]> {
  const byBatch = new Map<string, BatchErrorRow[]>()
  if (batchIds.length === 0) return byBatch
  const rows = deps.db
    .select()
    .from(batchErrors)
    .where(inArray(batchErrors.batch_id, batchIds))
    .orderBy(asc(batchErrors.seq))
    .all()
  for (const r of rows) {
    const list = byBatch.get(r.batch_id)
    if (list) list.push(r)
    else byBatch.set(r.batch_id, [r])
  }
  return byBatch
}

/** A batch row as the API shows it, with its stored errors (for other modules too). */
export function batchObject(deps: Deps, row: BatchRow): BatchObject {
  return toBatchObject(row, errorsOf(deps, [row.id]).get(row.id) ?? [])
}

/** The batch if the caller may see it (owner or superadmin), else the same 404 as a missing one. */
export function visibleBatch(deps: Deps, principal: UserPrincipal, batchId: string): BatchRow {
  const row = deps.db
    .select()
    .from(batches)
    .where(
      and(
        eq(batches.id, batchId),
        isSuperadmin(principal) ? undefined : eq(batches.user_id, principal.user.id),
      ),
    )
    .get()
  if (!row) throw notFound('batch_not_found', 'No such batch', 'batch_id')
  return row
}

export const getBatch = (deps: Deps, principal: UserPrincipal, batchId: string) =>
  batchObject(deps, visibleBatch(deps, principal, batchId))

/** GET /v1/batches: own batches; a superadmin sees all (SPEC §4). */
export function listBatches(
  deps: Deps,
  principal: UserPrincipal,
  query: PageParams & { status?: BatchStatus },
) {
  const where = and(
    isSuperadmin(principal) ? undefined : eq(batches.user_id, principal.user.id),
    query.status ? eq(batches.status, query.status) : undefined,
  )
  const { rows, has_more } = pageRows<BatchRow>(deps.db, batches, where, query)
  const errors = errorsOf(
    deps,
    rows.filter((r) => r.errors_total > 0).map((r) => r.id),
  )
  return toPage(
    rows.map((r) => toBatchObject(r, errors.get(r.id) ?? [])),
    has_more,
  )
}
