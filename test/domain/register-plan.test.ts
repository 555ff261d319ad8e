import { describe, expect, test } from 'bun:test'
import { machineLookup, REREGISTERED, registerPlan } from '../../src/domain/register-plan'

const fields = { name: 'w', hostname: 'h' }
const ask = (o: { workerId?: string; machineId?: string } = {}) => ({
  orgId: 'org_a',
  workerId: o.workerId,
  machineId: o.machineId,
  fields,
  now: 1000,
})
const row = (id: string, org_id = 'org_a', machine_id: string | null = 'm1') => ({ id, org_id, machine_id })

describe('machineLookup', () => {
  test('asked only when a machine is named and the id found nothing', () => {
    expect(machineLookup(ask({ machineId: 'm1' }), undefined)).toEqual({ orgId: 'org_a', machineId: 'm1' })
    expect(machineLookup(ask({ machineId: 'm1' }), row('wrk_1'))).toBeNull()
    expect(machineLookup(ask({ machineId: 'm1' }), row('wrk_1', 'org_b'))).toBeNull()
    expect(machineLookup(ask(), undefined)).toBeNull()
    expect(machineLookup(ask({ machineId: '' }), undefined)).toBeNull()
  })
})

describe('registerPlan', () => {
  test("another org's id is not owned, whatever the machine says", () => {
    expect(registerPlan(ask({ workerId: 'wrk_1' }), row('wrk_1', 'org_b'), row('wrk_2'))).toEqual({
      kind: 'not_owned',
    })
  })

  test('the worker found by id is reused, reset online and never-heartbeated, its holdings requeued', () => {
    const plan = registerPlan(ask({ workerId: 'wrk_1' }), row('wrk_1', 'org_a', 'm0'), undefined)
    expect(plan.kind).toBe('reuse')
    if (plan.kind !== 'reuse') return
    expect(plan.workerId).toBe('wrk_1')
    expect(plan.requeue).toEqual(REREGISTERED)
    expect(plan.requeue).toEqual({ reason: 'worker_reregistered', error: 'worker re-registered' })
    expect(plan.set).toMatchObject({
      ...fields,
      status: 'online',
      activity: 'idle',
      last_heartbeat_at: null,
      inventory_sig: null,
      loaded_models: [],
      last_seen_at: 1000,
      // No machine named: the stored one stays.
      machine_id: 'm0',
    })
  })

  test('a named machine replaces the stored machine_id of the worker reused by id', () => {
    const plan = registerPlan(
      ask({ workerId: 'wrk_1', machineId: 'm9' }),
      row('wrk_1', 'org_a', 'm0'),
      undefined,
    )
    expect(plan.kind === 'reuse' && plan.set.machine_id).toBe('m9')
  })

  test('the id wins over the machine; failing the id, the machine', () => {
    const both = registerPlan(ask({ workerId: 'wrk_1', machineId: 'm1' }), row('wrk_1'), row('wrk_2'))
    expect(both.kind === 'reuse' && both.workerId).toBe('wrk_1')
    const machine = registerPlan(ask({ workerId: 'wrk_gone', machineId: 'm1' }), undefined, row('wrk_2'))
    expect(machine.kind === 'reuse' && machine.workerId).toBe('wrk_2')
  })

  test('nothing found: a new worker of the org, registered now', () => {
    expect(registerPlan(ask({ machineId: 'm1' }), undefined, undefined)).toMatchObject({
      kind: 'insert',
      values: { ...fields, org_id: 'org_a', machine_id: 'm1', registered_at: 1000, status: 'online' },
    })
    const bare = registerPlan(ask(), undefined, undefined)
    expect(bare.kind === 'insert' && bare.values.machine_id).toBeNull()
  })
})
