import { ApiError, isBatchNotInProgress, isShardDoneElsewhere, isWorkerUnknown } from './client'

// What the daemon does when a control-plane call fails (docs/api.md §7, docs/api.md §0 status codes),
// decided here once for register, heartbeat, poll and a job's own calls. The callers apply the
// answer; they do not look at status codes themselves.
//
// - The network, 429 and 5xx are passing (client.ts ApiError.transient): retry later.
// - 401: the worker key is refused everywhere; nothing will change it: fatal.
// - 403 / 404 on heartbeat or poll: the server does not know this worker as ours (an admin removed
//   it, docs/api.md §3; its database was reset; or the id is another org's): register again — the
//   server then makes a new worker — and after a 403 the stored id is forgotten.
// - Registering with a stored id that is refused (403 / 404): forget it and register afresh. Any
//   other refusal of a registration is fatal: the same body would be refused again.
// - A poll with wait_seconds refused with 400: an older server; poll plainly from now on.
// - A job's call answered 403 (not the holder any more), 404 worker_not_found (the worker was
//   removed: its batches went back to the queue), 409 batch_not_in_progress or 409
//   shard_done_elsewhere (docs/api.md §16: the batch failed, or another copy of the shard finished
//   first): the job is moot; stop it without reporting a failure.
// - Anything else on heartbeat, poll or a job's call: retry later (the next beat, or with backoff).

export type ControlPlaneCall = 'register' | 'heartbeat' | 'poll' | 'job'

export type FailureAction =
  | { do: 'retry' }
  | { do: 'reregister'; forgetWorkerId: boolean }
  | { do: 'poll_plainly' }
  | {
      do: 'stop_job'
      reason: 'not_holder' | 'worker_unknown' | 'batch_not_in_progress' | 'shard_done_elsewhere'
    }
  | { do: 'fatal'; message: string }

export interface CallContext {
  /** register: the call carried a stored worker_id. */
  reusedWorkerId?: boolean
  /** poll: the call asked the server to hold it (wait_seconds > 0). */
  waitSeconds?: number
}

export function classifyFailure(call: ControlPlaneCall, e: unknown, o: CallContext = {}): FailureAction {
  if (!(e instanceof ApiError) || e.transient) return { do: 'retry' }
  if (call === 'job') {
    if (e.status === 403) return { do: 'stop_job', reason: 'not_holder' }
    if (isWorkerUnknown(e)) return { do: 'stop_job', reason: 'worker_unknown' }
    if (isBatchNotInProgress(e)) return { do: 'stop_job', reason: 'batch_not_in_progress' }
    if (isShardDoneElsewhere(e)) return { do: 'stop_job', reason: 'shard_done_elsewhere' }
    return { do: 'retry' }
  }
  if (e.status === 401) return { do: 'fatal', message: 'the server rejected the worker key' }
  if (call === 'register') {
    if ((e.status === 403 || e.status === 404) && o.reusedWorkerId)
      return { do: 'reregister', forgetWorkerId: true }
    return { do: 'fatal', message: `registration refused: ${e.message}` }
  }
  if (e.status === 403) return { do: 'reregister', forgetWorkerId: true }
  if (e.status === 404) return { do: 'reregister', forgetWorkerId: false }
  if (call === 'poll' && e.status === 400 && (o.waitSeconds ?? 0) > 0) return { do: 'poll_plainly' }
  return { do: 'retry' }
}
