import type { BatchRow, BatchStatus } from '../../db/schema'
import type { Deps } from '../../deps'
import { badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { type PageParams, toPage } from '../../lib/pagination'
import type { UserPrincipal } from '../auth/credentials'
import { type BatchCreate, type BatchObject, toBatchObject } from './model'

// Batches (SPEC §2–3, API.md §6). Creation only records the batch as `validating` and wakes the
// validator (src/services/validator.ts); every later status change is one guarded UPDATE that
// each storage engine renders from the table in states.ts.

const isSuperadmin = (p: UserPrincipal) => p.user.platform_role === 'superadmin'

/** POST /v1/batches: returns at once with status `validating` (SPEC §3). */
export async function createBatch(
  deps: Deps,
  principal: UserPrincipal,
  input: BatchCreate,
): Promise<BatchObject> {
  const now = deps.clock.now()
  const row = await deps.store.batches.create(
    {
      id: newId('batch_'),
      user_id: principal.user.id,
      api_key_id: principal.keyId,
      input_file_id: input.input_file_id,
      endpoint: input.endpoint ?? '/v1/chat/completions',
      completion_window: input.completion_window ?? '24h',
      metadata: input.metadata ?? null,
      now,
    },
    // API.md §6: the input file must be the caller's (else 404) and have purpose `batch` (else 400).
    (file) => {
      // API.md §15: an expired file is gone, even before the retention pass removes it.
      if (!file || (file.expires_at !== null && file.expires_at <= now))
        throw notFound('file_not_found', 'No such file', 'input_file_id')
      if (file.purpose !== 'batch') {
        throw badRequest('invalid_file_purpose', "The input file must have purpose 'batch'", 'input_file_id')
      }
    },
  )
  log.info('batch created', {
    batch_id: row.id,
    user_id: principal.user.id,
    input_file_id: row.input_file_id,
  })
  deps.batchEvents.created(row.id)
  return toBatchObject(row, [])
}

/** A batch row as the API shows it, with its stored errors (for other modules too). */
export async function batchObject(deps: Deps, row: BatchRow): Promise<BatchObject> {
  return toBatchObject(row, (await deps.store.batches.errorsOf([row.id])).get(row.id) ?? [])
}

/** The batch if the caller may see it (owner or superadmin), else the same 404 as a missing one. */
export async function visibleBatch(deps: Deps, principal: UserPrincipal, batchId: string): Promise<BatchRow> {
  const row = await deps.store.batches.get(batchId, isSuperadmin(principal) ? null : principal.user.id)
  if (!row) throw notFound('batch_not_found', 'No such batch', 'batch_id')
  return row
}

export const getBatch = async (deps: Deps, principal: UserPrincipal, batchId: string) =>
  batchObject(deps, await visibleBatch(deps, principal, batchId))

/** GET /v1/batches: own batches; a superadmin sees all (SPEC §4). */
export async function listBatches(
  deps: Deps,
  principal: UserPrincipal,
  query: PageParams & { status?: BatchStatus },
) {
  const { rows, has_more } = await deps.store.batches.page(
    { ownerId: isSuperadmin(principal) ? null : principal.user.id, status: query.status },
    query,
  )
  const errors = await deps.store.batches.errorsOf(rows.filter((r) => r.errors_total > 0).map((r) => r.id))
  return toPage(
    rows.map((r) => toBatchObject(r, errors.get(r.id) ?? [])),
    has_more,
  )
}
