import type { Deps } from '../../deps'
import type { WorkerPrincipal } from '../../domain/principal'
import { claimBatch, type Job, NO_HINTS, type PollHints } from './claim'
import { workerMatches } from './match-cache'
import { type PullItem, pullModelsFor } from './pulls'
import type { PollState, ServableModels } from './waiters'

// POST /workers/poll with `wait_seconds` (docs/api.md §7, ext): with nothing to claim, the request is
// held until a batch may have become claimable, then the ordinary claim runs again. The signal is
// a hint and the table is the truth (ARCHITECTURE.md rule 15): the validator and the requeue path call
// notify(model) whenever a batch becomes `validated`; the held polls whose worker can serve that
// model (the catalogue slugs it matches, worked out when it began to wait) and, when the batch's
// needs ride along, can meet them (Poll rule 7) re-run claimBatch(), and those that still find
// nothing keep waiting until their deadline. So one new batch wakes only its candidates, not the
// whole fleet, and a batch a worker's engine cannot run never wakes that worker's poll. A
// heartbeat that changes what a worker hosts wakes that worker's held poll (workerChanged), which
// then claims or waits with the new set. A poll without wait_seconds answers at once, as before.
// With nothing to claim, a poll answers the downloads its worker is asked to make now (pull_models,
// the heartbeat's rule), and a held poll of a worker that may download also wakes for a batch of a
// model it cannot serve: so a model nobody holds starts downloading when its batch is validated.

/**
 * The claim of POST /workers/poll, held up to `waitSeconds` (≤ 30, checked by the schema) while
 * nothing is claimable. Ends with {job: null} at the deadline, at server shutdown, or when the
 * caller hangs up (`request`: a batch must never be claimed for a poller that is gone).
 */
export async function pollForJob(
  deps: Deps & PollState,
  principal: WorkerPrincipal,
  workerId: string,
  waitSeconds = 0,
  request?: AbortSignal,
  /** docs/api.md §7 placement: what the poll says of the worker's models and GPUs now. */
  hints: PollHints = NO_HINTS,
): Promise<PollAnswer> {
  const end = deps.pollWaiters.begin(workerId)
  try {
    return await poll(deps, principal, workerId, waitSeconds, request, hints)
  } finally {
    end()
  }
}

async function poll(
  deps: Deps & PollState,
  principal: WorkerPrincipal,
  workerId: string,
  waitSeconds: number,
  request: AbortSignal | undefined,
  hints: PollHints,
): Promise<PollAnswer> {
  const first = await claimOrPull(deps, principal, workerId, hints)
  if (first.job || first.pull_models || waitSeconds <= 0) return first
  const signals = request ? [deps.shutdown.signal, request] : [deps.shutdown.signal]
  const deadline = performance.now() + waitSeconds * 1000
  for (;;) {
    const left = deadline - performance.now()
    if (left <= 0) return { job: null }
    const { models, mayPull } = await servable(deps, principal, workerId)
    if ((await deps.pollWaiters.wait(left, workerId, models, signals, mayPull)) === 'ended')
      return { job: null }
    const again = await claimOrPull(deps, principal, workerId, hints)
    if (again.job || again.pull_models) return again
  }
}

/**
 * The claim; with nothing to claim, the downloads this worker is asked to make now (docs/api.md §7
 * pull_models: the heartbeat's rule), so an idle worker holding a poll starts fetching a model as
 * soon as a batch for it waits, not at its next heartbeat.
 */
async function claimOrPull(
  deps: Deps & PollState,
  principal: WorkerPrincipal,
  workerId: string,
  hints: PollHints,
): Promise<PollAnswer> {
  const { job, worker } = await claimBatch(deps, principal, workerId, hints)
  if (job) return { job }
  // The heartbeat's gate (service.ts heartbeat), on the row the claim read: only an idle worker
  // that may download is asked, and any other poll reads nothing more.
  if (worker.activity !== 'idle' || worker.max_download_gb <= 0) return { job: null }
  const pull_models = await pullModelsFor(deps, workerId)
  return pull_models.length ? { job: null, pull_models } : { job: null }
}

/**
 * The batch models this worker can serve now (claimBatch's candidates), with what it can do with
 * each; and whether it may be asked to download (a batch of a model it cannot serve wakes it too).
 */
async function servable(
  deps: Deps & PollState,
  principal: WorkerPrincipal,
  workerId: string,
): Promise<{ models: ServableModels; mayPull: boolean }> {
  const { worker, capabilities } = await workerMatches(deps, principal, workerId)
  return { models: capabilities, mayPull: worker.max_download_gb > 0 }
}

export interface PollAnswer {
  job: Job | null
  pull_models?: PullItem[]
}
