import type { WorkerRow } from '../db/schema'
import { unauthorized } from '../lib/errors'
import type { RequeueCause } from './requeue'
import { registeredState } from './worker-rules'

// docs/api.md §7 registration: whether a registration reuses a worker (and which one) or makes a new
// one, decided once here; each storage engine (src/store/*/fleet.ts register) reads the candidates
// with its own locks, asks these functions, and applies the plan in its transaction.

/** What a registration states, as the decision needs it (store/fleet.ts Registration). */
export interface RegisterAsk<F extends object> {
  orgId: string
  /** Re-registration by id (another org's → not owned) or, failing that, by machine_id. */
  workerId: string | undefined
  machineId: string | undefined
  fields: F
  now: number
}

type Candidate = Pick<WorkerRow, 'id' | 'org_id' | 'machine_id'>

/**
 * The key's org was deleted between the key's check and the registration (docs/api.md §3: deleting
 * an org deletes its worker keys): answered as the key's next request would be, an unknown key.
 */
export const orgGone = () => unauthorized('invalid_api_key', 'Invalid API key')

/** docs/api.md §7: what a reused worker held is requeued as one failed attempt with this reason. */
export const REREGISTERED: RequeueCause = {
  reason: 'worker_reregistered',
  error: 'worker re-registered',
}

/**
 * The second look-up, by machine: the org's newest worker with this machine_id, asked only when
 * the registration names a machine and the look-up by id found nothing (an id found in another org
 * is not owned: no machine look-up either).
 */
export function machineLookup(
  ask: Pick<RegisterAsk<object>, 'orgId' | 'machineId'>,
  byId: Candidate | undefined,
): { orgId: string; machineId: string } | null {
  return byId === undefined && ask.machineId ? { orgId: ask.orgId, machineId: ask.machineId } : null
}

export type RegisterPlan<F extends object> =
  | { kind: 'not_owned' }
  | {
      kind: 'reuse'
      workerId: string
      /** The worker row's new state; its runtimes, GPUs, models and pull asks are replaced. */
      set: ReturnType<typeof registeredState<F>> & { machine_id: string | null }
      requeue: typeof REREGISTERED
    }
  | {
      kind: 'insert'
      /** The new worker row but its id (the engine gives one). */
      values: ReturnType<typeof registeredState<F>> & {
        org_id: string
        machine_id: string | null
        registered_at: number
      }
    }

/**
 * Given the worker found by id (when the registration names one) and the one found by machine
 * (machineLookup): another org's id is not owned; else the one found is reused, id first; else a
 * new worker. Either way it is registered online and never-heartbeated (registeredState).
 */
export function registerPlan<F extends object>(
  ask: RegisterAsk<F>,
  byId: Candidate | undefined,
  byMachine: Candidate | undefined,
): RegisterPlan<F> {
  if (byId && byId.org_id !== ask.orgId) return { kind: 'not_owned' }
  const fields = registeredState(ask.fields, ask.now)
  const existing = byId ?? byMachine
  if (existing) {
    return {
      kind: 'reuse',
      workerId: existing.id,
      set: { ...fields, machine_id: ask.machineId ?? existing.machine_id },
      requeue: REREGISTERED,
    }
  }
  return {
    kind: 'insert',
    values: { ...fields, org_id: ask.orgId, machine_id: ask.machineId ?? null, registered_at: ask.now },
  }
}
