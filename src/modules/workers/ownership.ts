import type { WorkerRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { WorkerPrincipal } from '../../domain/principal'
import { forbidden, notFound } from '../../lib/errors'
import type { HeadsAsk } from '../../store/queue'

// Which worker a key may act for (docs/api.md §7), apart from the service so that the service,
// the poll and the claim all use it without importing each other.

/** The worker, if it belongs to the key's org: unknown → 404, another org's → 403 (docs/api.md §7). */
export async function ownWorker(
  deps: Deps,
  principal: WorkerPrincipal,
  workerId: string,
): Promise<WorkerRow> {
  return checkOwner(await deps.store.fleet.findWorker(workerId), principal)
}

/**
 * ownWorker with what the worker hosts (POST /workers/poll), read at once; not read (null) when its
 * hosting_seq is `knownSeq`; with the waiting heads of `heads` where the engine reads them in the
 * same statement (FleetStore.findWorkerWithHosting).
 */
export async function ownWorkerWithHosting(
  deps: Deps,
  principal: WorkerPrincipal,
  workerId: string,
  knownSeq?: number,
  heads?: HeadsAsk,
) {
  const found = await deps.store.fleet.findWorkerWithHosting(workerId, knownSeq, heads)
  return { worker: checkOwner(found?.worker, principal), hosting: found!.hosting, heads: found!.heads }
}

function checkOwner(w: WorkerRow | undefined, principal: WorkerPrincipal): WorkerRow {
  if (!w) throw notFound('worker_not_found', 'No such worker', 'worker_id')
  if (w.org_id !== principal.orgId) throw notOwned()
  return w
}

export const notOwned = () =>
  forbidden('worker_not_owned', "This worker does not belong to the key's organization")
