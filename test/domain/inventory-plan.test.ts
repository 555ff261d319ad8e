import { describe, expect, test } from 'bun:test'
import { inventoryPlan, type OnDiskModel } from '../../src/domain/inventory-plan'

const model = (name: string, loaded = false): OnDiskModel => ({
  name,
  runtime: 'ollama',
  digest: `sha256:${name}`,
  size_bytes: 100,
  loaded,
})

describe('inventoryPlan', () => {
  test('an inventory replaces the previous one: forget, reset, upsert, then loaded, orphans, sig', () => {
    const inv = [model('a'), model('b', true)]
    expect(inventoryPlan(inv, ['b', 'c'], 'sig1')).toEqual([
      { op: 'delete_unconfigured' },
      { op: 'reset_reported' },
      { op: 'upsert_on_disk', models: inv },
      { op: 'upsert_loaded', names: ['b', 'c'] },
      { op: 'delete_orphans' },
      { op: 'set_sig', sig: 'sig1' },
    ])
  })

  test('an empty inventory clears every reported row and upserts nothing', () => {
    expect(inventoryPlan([], [], 's')).toEqual([
      { op: 'delete_unconfigured' },
      { op: 'reset_reported' },
      { op: 'delete_orphans' },
      { op: 'set_sig', sig: 's' },
    ])
  })

  test('without an inventory (older daemon) only the loaded flags change', () => {
    expect(inventoryPlan(undefined, ['x'], 's')).toEqual([
      { op: 'clear_loaded' },
      { op: 'upsert_loaded', names: ['x'] },
      { op: 'delete_orphans' },
      { op: 'set_sig', sig: 's' },
    ])
  })

  test('loaded names are applied once each, in first-seen order', () => {
    const plan = inventoryPlan(undefined, ['b', 'a', 'b', 'a'], 's')
    expect(plan).toContainEqual({ op: 'upsert_loaded', names: ['b', 'a'] })
  })

  test('the plan does not alias the caller’s inventory array', () => {
    const inv = [model('a')]
    const plan = inventoryPlan(inv, [], 's')
    inv.push(model('b'))
    expect(plan[2]).toEqual({ op: 'upsert_on_disk', models: [model('a')] })
  })
})
