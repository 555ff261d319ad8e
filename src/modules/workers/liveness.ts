import type { Config } from '../../config'
import type { WorkerRow } from '../../db/schema'
import type { Clock } from '../../lib/clock'

// Read-time liveness (docs/api.md §7, docs/api.md §8 Pool rule 2): a worker is online when stored online AND
// seen within HEARTBEAT_TIMEOUT_SECONDS. The one cutoff: poll, listings, pool capacity, /metrics,
// pull_models asks and the sweeper all take it from here.

type LivenessDeps = { clock: Clock; config: Pick<Config, 'HEARTBEAT_TIMEOUT_SECONDS'> }

/** Seen at or before this instant = silent. */
export const onlineCutoff = (deps: LivenessDeps, now = deps.clock.now()) =>
  now - deps.config.HEARTBEAT_TIMEOUT_SECONDS

export const isOnline = (deps: LivenessDeps, w: Pick<WorkerRow, 'status' | 'last_seen_at'>) =>
  w.status === 'online' && w.last_seen_at > onlineCutoff(deps)
