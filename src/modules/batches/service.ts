import type { BatchRow, BatchStatus } from '../../db/schema'
import type { Deps } from '../../deps'
import { BATCH_ENDPOINTS } from '../../domain/batch-line'
import type { UserPrincipal } from '../../domain/principal'
import type { Waiting } from '../../domain/waiting'
import type { BatchEventsState } from '../../lib/batch-events'
import { badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { type PageParams, pageInMemory, toPage } from '../../lib/pagination'
import { type BatchCreate, type BatchObject, toBatchObject, toShardObject } from './model'
import { readWaiting, viewerOf } from './waiting'

// Batches (docs/api.md §6, docs/api.md §6). Creation only records the batch as `validating` and wakes the
// validator (src/services/validator.ts); every later status change is an edge of the table in
// src/domain/batch-states.ts, applied by the storage engine.

const isSuperadmin = (p: UserPrincipal) => p.user.platform_role === 'superadmin'

/** POST /v1/batches: returns at once with status `validating` (docs/api.md §6). */
export async function createBatch(
  deps: Deps & BatchEventsState,
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
      endpoint: input.endpoint ?? BATCH_ENDPOINTS[0],
      completion_window: input.completion_window ?? '24h',
      metadata: input.metadata ?? null,
      now,
    },
    // docs/api.md §6: the input file must be the caller's (else 404) and have purpose `batch` (else 400).
    (file) => {
      // docs/api.md §15: an expired file is gone, even before the retention pass removes it.
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

/** A batch row as `principal` sees it, with its stored errors and why it waits (docs/api.md §6). */
export async function batchObject(
  deps: Deps & BatchEventsState,
  principal: UserPrincipal,
  row: BatchRow,
): Promise<BatchObject> {
  const [errors, shards, waiting] = await Promise.all([
    deps.store.batches.errorsOf([row.id]),
    row.split ? deps.store.queue.shardTallies([row.id]) : undefined,
    waitingFor(deps, principal, [row]),
  ])
  return toBatchObject(row, errors.get(row.id) ?? [], shards?.get(row.id) ?? null, waiting(row))
}

/** docs/api.md §6 `waiting` of `rows` as `principal` reads them: the fleet and the queue read once. */
export async function waitingFor(
  deps: Deps,
  principal: UserPrincipal,
  rows: readonly BatchRow[],
): Promise<(row: BatchRow) => Waiting | null> {
  if (!rows.some((r) => r.status === 'validated')) return () => null
  const [of, viewer] = await Promise.all([readWaiting(deps, rows), viewerOf(deps, principal)])
  return (row) => of(row, viewer)
}

/** The batch if the caller may see it (owner or superadmin), else the same 404 as a missing one. */
export async function visibleBatch(
  deps: Deps & BatchEventsState,
  principal: UserPrincipal,
  batchId: string,
): Promise<BatchRow> {
  const row = await deps.store.batches.get(batchId, isSuperadmin(principal) ? null : principal.user.id)
  if (!row) throw notFound('batch_not_found', 'No such batch', 'batch_id')
  return row
}

export const getBatch = async (deps: Deps & BatchEventsState, principal: UserPrincipal, batchId: string) =>
  batchObject(deps, principal, await visibleBatch(deps, principal, batchId))

/** GET /v1/batches: own batches; a superadmin sees all (docs/api.md §6). */
export async function listBatches(
  deps: Deps & BatchEventsState,
  principal: UserPrincipal,
  query: PageParams & { status?: BatchStatus },
) {
  const { rows, has_more } = await deps.store.batches.page(
    { ownerId: isSuperadmin(principal) ? null : principal.user.id, status: query.status },
    query,
  )
  const [errors, shards, waiting] = await Promise.all([
    deps.store.batches.errorsOf(rows.filter((r) => r.errors_total > 0).map((r) => r.id)),
    deps.store.queue.shardTallies(rows.filter((r) => r.split).map((r) => r.id)),
    waitingFor(deps, principal, rows),
  ])
  return toPage(
    rows.map((r) => toBatchObject(r, errors.get(r.id) ?? [], shards.get(r.id) ?? null, waiting(r))),
    has_more,
  )
}

/**
 * GET /v1/batches/{id}/shards (docs/api.md §16, ext): a split batch's shards in shard order (not newest
 * first: the order of its request lines), paged as every list is (docs/api.md §0); none when it runs whole.
 */
export async function listShards(
  deps: Deps & BatchEventsState,
  principal: UserPrincipal,
  batchId: string,
  query: PageParams,
) {
  const batch = await visibleBatch(deps, principal, batchId)
  const rows = batch.split ? await deps.store.queue.shardsOf(batch.id) : []
  const page = pageInMemory(rows, query)
  return toPage(page.rows.map(toShardObject), page.has_more)
}
