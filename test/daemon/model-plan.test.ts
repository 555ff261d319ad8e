import { describe, expect, test } from 'bun:test'
import { LRU_WHY, paramsKey, planLoad, type TableModel } from '../../src/daemon/models/plan'

// The VRAM rule of a daemon that loads its models (docs/worker.md "VRAM budget"): what is unloaded,
// what waits and what fails, as a pure function of the manager's table.

const P = paramsKey({})
const loaded = (name: string, vram_gb: number | null, o: Partial<TableModel> = {}): TableModel => ({
  name,
  state: 'loaded',
  vram_gb,
  in_use: 0,
  last_used_ms: 0,
  params_key: P,
  ...o,
})
const want = (name: string, vram_gb: number | null, params: Record<string, unknown> = {}) => ({
  name,
  vram_gb,
  params_key: paramsKey(params),
})

describe('planLoad', () => {
  test('a model needing more than the whole budget fails, naming both figures', () => {
    expect(planLoad([], want('big', 80), 24, true)).toEqual({
      do: 'fail',
      why: 'big needs 80 GB of VRAM, this worker has 24 GB',
    })
    // Exactly the budget fits.
    expect(planLoad([], want('big', 24), 24, true)).toEqual({ do: 'load', unload: [] })
  })

  test('loaded with the same params: used as it is; params compare whatever their key order', () => {
    const m = loaded('a', 10, { params_key: paramsKey({ ctx_size: 1024, embedding: true }) })
    expect(planLoad([m], want('a', 10, { embedding: true, ctx_size: 1024 }), 24, true)).toEqual({ do: 'use' })
  })

  test('being loaded or unloaded: wait', () => {
    expect(planLoad([loaded('a', 10, { state: 'loading' })], want('a', 10), 24, true)).toMatchObject({
      do: 'wait',
      why: 'a is being loaded',
    })
    expect(planLoad([loaded('a', 10, { state: 'unloading' })], want('a', 10), 24, true)).toMatchObject({
      do: 'wait',
      why: 'a is being unloaded',
    })
  })

  test('loaded with other params: reloaded when idle, waited for when in use; an attached engine uses any copy', () => {
    const other = loaded('a', 10, { params_key: paramsKey({ ctx_size: 512 }) })
    expect(planLoad([other], want('a', 10, { ctx_size: 1024 }), 24, true)).toEqual({
      do: 'load',
      unload: [{ name: 'a', why: 'loaded with other params' }],
    })
    expect(planLoad([{ ...other, in_use: 2 }], want('a', 10, { ctx_size: 1024 }), 24, true)).toEqual({
      do: 'wait',
      why: 'a is loaded with other params and in use by 2 jobs',
      blockers: ['a'],
    })
    expect(planLoad([{ ...other, in_use: 2 }], want('a', 10, { ctx_size: 1024 }), 24, false)).toEqual({
      do: 'use',
    })
    // Loaded before this daemon knew with what: used.
    expect(planLoad([{ ...other, params_key: null }], want('a', 10, { ctx_size: 1 }), 24, true)).toEqual({
      do: 'use',
    })
  })

  test('fits beside what is loaded: nothing is unloaded; a null vram_gb counts nothing', () => {
    expect(planLoad([loaded('a', 10)], want('b', 14), 24, true)).toEqual({ do: 'load', unload: [] })
    expect(planLoad([loaded('a', null), loaded('c', 24)], want('b', null), 24, true)).toEqual({
      do: 'load',
      unload: [],
    })
  })

  test('no budget: unlimited, nothing is unloaded', () => {
    expect(planLoad([loaded('a', 500)], want('b', 500), null, true)).toEqual({ do: 'load', unload: [] })
  })

  test('no room: the least recently used models no job needs are unloaded, only as many as needed', () => {
    const models = [
      loaded('old', 8, { last_used_ms: 100 }),
      loaded('busy', 8, { last_used_ms: 50, in_use: 1 }),
      loaded('older', 4, { last_used_ms: 10 }),
      loaded('recent', 4, { last_used_ms: 900 }),
    ]
    // 24 used of 24; b needs 10: older (4) then old (8) free 12.
    expect(planLoad(models, want('b', 10), 24, true)).toEqual({
      do: 'load',
      unload: [
        { name: 'older', why: LRU_WHY },
        { name: 'old', why: LRU_WHY },
      ],
    })
  })

  test('a model of unknown size is never unloaded for room (it frees nothing the budget counts)', () => {
    const models = [loaded('unknown', null, { last_used_ms: 0 }), loaded('a', 20, { last_used_ms: 5 })]
    expect(planLoad(models, want('b', 10), 24, true)).toEqual({
      do: 'load',
      unload: [{ name: 'a', why: LRU_WHY }],
    })
  })

  test('the room is held by models in use: wait for them, naming them; never unload under a job', () => {
    const models = [loaded('a', 16, { in_use: 1 }), loaded('idle', 4)]
    expect(planLoad(models, want('b', 10), 24, true)).toEqual({
      do: 'wait',
      why: 'b needs 10 GB, 4 GB free of 24 GB (a in use by 1 job)',
      blockers: ['a'],
    })
    // A model another load is bringing in holds its room too.
    expect(planLoad([loaded('a', 20, { state: 'loading' })], want('b', 10), 24, true)).toEqual({
      do: 'wait',
      why: 'b needs 10 GB, 4 GB free of 24 GB (a loading)',
      blockers: ['a'],
    })
  })
})
