import { describe, expect, test } from 'bun:test'
import {
  type GpuRoom,
  LRU_WHY,
  type ModelWant,
  paramsKey,
  planCopy,
  planLoad,
  planSelf,
  type TableModel,
  UNSIZED_WHY,
  wants,
} from '../../src/daemon/models/plan'

// Where a daemon that loads its models places each one, and what it unloads first (docs/worker.md
// "GPUs"): a pure function of the manager's table and the GPU ledger — or, without GPUs, one budget.

const P = paramsKey({})
const loaded = (name: string, vram_gb: number | null, o: Partial<TableModel> = {}): TableModel => ({
  name,
  state: 'loaded',
  vram_gb,
  in_use: 0,
  last_used_ms: 0,
  params_key: P,
  gpus: null,
  claim_gb: null,
  ...o,
})
const want = (
  name: string,
  vram_gb: number | null,
  params: Record<string, unknown> = {},
  engine = 'llama.cpp',
  derives = true,
): ModelWant => ({ name, vram_gb, params_key: paramsKey(params), ...wants(engine, params, derives, vram_gb) })
const budget = (budget_gb: number | null) => ({ budget_gb })
const gpu = (index: number, total_gb = 24, free_gb: number | null = total_gb): GpuRoom => ({
  index,
  total_gb,
  free_gb,
})
const box = (...g: GpuRoom[]) => ({ gpus: g })

describe('planLoad with one budget (no GPU, --vram-gb)', () => {
  test('a model needing more than the whole budget fails, naming both figures', () => {
    expect(planLoad([], want('big', 80), budget(24), true)).toEqual({
      do: 'fail',
      why: 'big needs 80 GB of VRAM, this worker has 24 GB',
    })
    // Exactly the budget fits.
    expect(planLoad([], want('big', 24), budget(24), true)).toMatchObject({
      do: 'load',
      unload: [],
      gpus: null,
    })
  })

  test('loaded with the same params: used as it is; params compare whatever their key order', () => {
    const m = loaded('a', 10, { params_key: paramsKey({ ctx_size: 1024, embedding: true }) })
    expect(planLoad([m], want('a', 10, { embedding: true, ctx_size: 1024 }), budget(24), true)).toEqual({
      do: 'use',
      instance: 'a',
    })
  })

  test('being loaded or unloaded: wait', () => {
    expect(planLoad([loaded('a', 10, { state: 'loading' })], want('a', 10), budget(24), true)).toMatchObject({
      do: 'wait',
      why: 'a is being loaded',
    })
    expect(
      planLoad([loaded('a', 10, { state: 'unloading' })], want('a', 10), budget(24), true),
    ).toMatchObject({
      do: 'wait',
      why: 'a is being unloaded',
    })
  })

  test('loaded with other params: reloaded when idle, waited for when in use; an attached engine uses any copy', () => {
    const other = loaded('a', 10, { params_key: paramsKey({ ctx_size: 512 }) })
    expect(planLoad([other], want('a', 10, { ctx_size: 1024 }), budget(24), true)).toMatchObject({
      do: 'load',
      unload: [{ name: 'a', why: 'loaded with other params' }],
    })
    expect(planLoad([{ ...other, in_use: 2 }], want('a', 10, { ctx_size: 1024 }), budget(24), true)).toEqual({
      do: 'wait',
      why: 'a is loaded with other params and in use by 2 jobs',
      blockers: ['a'],
    })
    expect(planLoad([{ ...other, in_use: 2 }], want('a', 10, { ctx_size: 1024 }), budget(24), false)).toEqual(
      {
        do: 'use',
        instance: 'a',
      },
    )
    // Loaded before this daemon knew with what: used.
    expect(
      planLoad([{ ...other, params_key: null }], want('a', 10, { ctx_size: 1 }), budget(24), true),
    ).toEqual({ do: 'use', instance: 'a' })
  })

  test('fits beside what is loaded: nothing is unloaded', () => {
    expect(planLoad([loaded('a', 10)], want('b', 14), budget(24), true)).toMatchObject({
      do: 'load',
      unload: [],
      claim_gb: 14,
    })
  })

  test('no budget: unlimited, nothing is unloaded', () => {
    expect(planLoad([loaded('a', 500)], want('b', 500), budget(null), true)).toMatchObject({
      do: 'load',
      unload: [],
      gpus: null,
    })
  })

  test('no room: the least recently used models no job needs are unloaded, only as many as needed', () => {
    const models = [
      loaded('old', 8, { last_used_ms: 100 }),
      loaded('busy', 8, { last_used_ms: 50, in_use: 1 }),
      loaded('older', 4, { last_used_ms: 10 }),
      loaded('recent', 4, { last_used_ms: 900 }),
    ]
    // 24 used of 24; b needs 10: older (4) then old (8) free 12.
    expect(planLoad(models, want('b', 10), budget(24), true)).toMatchObject({
      do: 'load',
      unload: [
        { name: 'older', why: LRU_WHY },
        { name: 'old', why: LRU_WHY },
      ],
    })
  })

  test('a model of no declared size holds the whole budget, and is the first unloaded for room', () => {
    const models = [loaded('a', 4, { last_used_ms: 0 }), loaded('unsized', null, { last_used_ms: 5 })]
    expect(planLoad(models, want('b', 4), budget(24), true)).toMatchObject({
      do: 'load',
      unload: [{ name: 'unsized', why: UNSIZED_WHY }],
    })
    // Loading one of no declared size takes the whole budget: everything idle goes.
    expect(planLoad([loaded('a', 4)], want('u', null), budget(24), true)).toMatchObject({
      do: 'load',
      unload: [{ name: 'a', why: LRU_WHY }],
      claim_gb: 24,
    })
  })

  test('the room is held by models in use: wait for them, naming them; never unload under a job', () => {
    const models = [loaded('a', 16, { in_use: 1 }), loaded('idle', 4)]
    expect(planLoad(models, want('b', 10), budget(24), true)).toEqual({
      do: 'wait',
      why: 'b needs 10 GB, 4 GB free of 24 GB (a in use by 1 job)',
      blockers: ['a'],
    })
    // A model another load is bringing in holds its room too.
    expect(planLoad([loaded('a', 20, { state: 'loading' })], want('b', 10), budget(24), true)).toEqual({
      do: 'wait',
      why: 'b needs 10 GB, 4 GB free of 24 GB (a loading)',
      blockers: ['a'],
    })
  })
})

describe('planLoad over a ledger of GPUs', () => {
  const on = (gpus: number[], claim_gb: number) => ({ gpus, claim_gb })

  test('what a model asks: its tensor-parallel size of GPUs, the fraction its profile sets', () => {
    expect(wants('vllm', { tensor_parallel_size: 2 }, true, 40)).toEqual({
      gpu_count: 2,
      fraction: null,
      fraction_key: 'gpu_memory_utilization',
      fraction_of: 'total',
      whole: false,
    })
    expect(wants('vllm', { tensor_parallel_size: 2, pipeline_parallel_size: 2 }, true, 40).gpu_count).toBe(4)
    // SGLang's fraction is of the memory free when it starts, vLLM's of the whole GPU.
    expect(wants('sglang', { tp_size: 2, mem_fraction_static: 0.8 }, true, null)).toEqual({
      gpu_count: 2,
      fraction: 0.8,
      fraction_key: 'mem_fraction_static',
      fraction_of: 'free',
      whole: false,
    })
    // A command without {params} cannot be given a fraction, nor the profile's: the engine takes its
    // default of whole GPUs. llama.cpp takes as few GPUs as it fits on.
    expect(wants('vllm', { gpu_memory_utilization: 0.5 }, false, 8)).toEqual({
      gpu_count: 1,
      fraction: null,
      fraction_key: null,
      fraction_of: 'total',
      whole: true,
    })
    expect(wants('sglang', { tp_size: 2 }, false, 8)).toMatchObject({ gpu_count: 2, whole: true })
    expect(wants('llama.cpp', { tensor_parallel_size: 2 }, true, 8).gpu_count).toBeNull()
    expect(wants('tgi', {}, true, 8)).toEqual({
      gpu_count: 1,
      fraction: null,
      fraction_key: null,
      fraction_of: null,
      whole: false,
    })
    // No declared size and no fraction: whole GPUs, whatever the engine; a set fraction is what it holds.
    expect(wants('tgi', {}, true, null).whole).toBe(true)
    expect(wants('vllm', {}, true, null).whole).toBe(true)
    expect(wants('vllm', { gpu_memory_utilization: 0.5 }, true, null).whole).toBe(false)
  })

  test('two models that each need most of a GPU go on two GPUs, the one with the most free first', () => {
    const first = planLoad([], want('a', 20, {}, 'vllm'), box(gpu(0), gpu(1, 24, 23)), true)
    expect(first).toMatchObject({ do: 'load', gpus: [0], unload: [] })
    // vLLM takes its fraction of the whole GPU: the daemon derives it from vram_gb, with the margin
    // (20 ÷ 24 = 0.8333, + 0.03, up to a hundredth).
    const f = 0.87
    expect(first).toMatchObject({ extra_params: { gpu_memory_utilization: f } })
    expect((first as any).claim_gb).toBeCloseTo(f * 24)
    const second = planLoad(
      [loaded('a', 20, on([0], f * 24))],
      want('b', 20, {}, 'vllm'),
      box(gpu(0, 24, 3), gpu(1)),
      true,
    )
    expect(second).toMatchObject({ do: 'load', gpus: [1], unload: [] })
    expect((second as any).why).toStartWith('on GPU 1 (GPU 1: ')
  })

  test('tensor parallel over two: both GPUs, each holding half', () => {
    const plan = planLoad([], want('big', 40, { tensor_parallel_size: 2 }, 'vllm'), box(gpu(0), gpu(1)), true)
    expect(plan).toMatchObject({ do: 'load', gpus: [0, 1], extra_params: { gpu_memory_utilization: 0.87 } })
    expect(
      planLoad([], want('big', 40, { tensor_parallel_size: 4 }, 'vllm'), box(gpu(0), gpu(1)), true),
    ).toEqual({
      do: 'fail',
      why: 'big needs 4 GPUs, this worker has 2 GPUs',
    })
    expect(
      planLoad([], want('big', 60, { tensor_parallel_size: 2 }, 'vllm'), box(gpu(0), gpu(1)), true),
    ).toEqual({
      do: 'fail',
      why: 'big needs 30 GB on each of 2 GPUs, the largest GPU of this worker holds 24 GB',
    })
  })

  test('two small models share one GPU when the other is taken', () => {
    const a = loaded('a', 8, on([0], 8 + 0.72))
    const big = loaded('big', 22, on([1], 22.5))
    const plan = planLoad([a, big], want('b', 8, {}, 'vllm'), box(gpu(0, 24, 15), gpu(1, 24, 1.5)), true)
    expect(plan).toMatchObject({
      do: 'load',
      gpus: [0],
      unload: [],
      extra_params: { gpu_memory_utilization: 0.37 },
    })
  })

  test('free is the smaller of the driver’s figure and the total less what the daemon placed', () => {
    // The driver sees another process holding 20 GB of GPU 0: b goes to GPU 1 though nothing of ours is on 0.
    expect(planLoad([], want('b', 10, {}, 'vllm'), box(gpu(0, 24, 4), gpu(1, 24, 20)), true)).toMatchObject({
      gpus: [1],
    })
    // A model still loading is not in the driver's figure yet: its share counts.
    const loading = loaded('a', 20, { state: 'loading', ...on([1], 21) })
    expect(
      planLoad([loading], want('b', 10, {}, 'vllm'), box(gpu(0, 24, 4), gpu(1, 24, 24)), true),
    ).toMatchObject({
      do: 'wait',
      blockers: ['a'],
    })
  })

  test('a model that needs a GPU others hold: per GPU, the least recently used idle model is unloaded', () => {
    const models = [
      loaded('a', 20, { ...on([0], 21), last_used_ms: 100 }),
      loaded('b', 20, { ...on([1], 21), last_used_ms: 50 }),
    ]
    const plan = planLoad(models, want('c', 20, {}, 'vllm'), box(gpu(0, 24, 3), gpu(1, 24, 3)), true)
    expect(plan).toMatchObject({ do: 'load', gpus: [1], unload: [{ name: 'b', why: LRU_WHY }] })
    // b is in use: a goes instead, though b is older.
    const busy = planLoad(
      [models[0]!, { ...models[1]!, in_use: 1 }],
      want('c', 20, {}, 'vllm'),
      box(gpu(0, 24, 3), gpu(1, 24, 3)),
      true,
    )
    expect(busy).toMatchObject({ do: 'load', gpus: [0], unload: [{ name: 'a', why: LRU_WHY }] })
    // Both in use: wait, saying what each GPU has free.
    expect(
      planLoad(
        [
          { ...models[0]!, in_use: 1 },
          { ...models[1]!, in_use: 2 },
        ],
        want('c', 20, {}, 'vllm'),
        box(gpu(0, 24, 3), gpu(1, 24, 3)),
        true,
      ),
    ).toEqual({
      do: 'wait',
      why: 'c needs 1 GPU with 20.88 GB free each; GPU 0 3 GB free, GPU 1 3 GB free (a in use by 1 job, b in use by 2 jobs)',
      blockers: ['a', 'b'],
    })
  })

  test('tensor parallel needing both GPUs unloads what sits on each', () => {
    const models = [loaded('a', 10, on([0], 11)), loaded('b', 10, { ...on([1], 11), last_used_ms: 5 })]
    expect(
      planLoad(
        models,
        want('big', 40, { tensor_parallel_size: 2 }, 'vllm'),
        box(gpu(0, 24, 13), gpu(1, 24, 13)),
        true,
      ),
    ).toMatchObject({
      do: 'load',
      gpus: [0, 1],
      unload: [
        { name: 'a', why: LRU_WHY },
        { name: 'b', why: LRU_WHY },
      ],
    })
  })

  test('a profile that sets its fraction is given GPUs with that much free; the daemon adds none', () => {
    const plan = planLoad(
      [loaded('a', 8, on([0], 12))],
      want('b', 8, { gpu_memory_utilization: 0.6 }, 'vllm'),
      box(gpu(0, 24, 12), gpu(1, 24, 24)),
      true,
    )
    expect(plan).toMatchObject({ do: 'load', gpus: [1], extra_params: {} })
    expect((plan as any).claim_gb).toBeCloseTo(14.4)
  })

  test('SGLang’s fraction is of the free memory: a second model on a GPU is given a larger one, sized to what is left', () => {
    // SGLang 0.4–0.5 profile_max_num_token: its cache is fraction × (free before the load) − weights.
    const first = planLoad([], want('a', 8, {}, 'sglang'), box(gpu(0, 24, 23.75)), true)
    // 8 GB of the 23.75 free, and the margin: 0.3368 + 0.03, up to a hundredth.
    const f1 = 0.37
    expect(first).toMatchObject({ do: 'load', gpus: [0], extra_params: { mem_fraction_static: f1 } })
    expect((first as any).claim_gb).toBeCloseTo(f1 * 23.75)
    // The second sees what the first holds as taken: of the 14.96 GB left, 8 GB and the margin.
    const held = f1 * 23.75
    const second = planLoad(
      [loaded('a', 8, on([0], held))],
      want('b', 8, {}, 'sglang'),
      box(gpu(0, 24, 23.75 - held)),
      true,
    )
    // 8 GB of the 14.96 left (23.75 − 0.37 × 23.75), and the margin: 0.5347 + 0.03.
    const f2 = 0.57
    expect(second).toMatchObject({
      do: 'load',
      gpus: [0],
      unload: [],
      extra_params: { mem_fraction_static: f2 },
    })
    // Given the first one's fraction, its cache would get 0.37 × 14.96 − 8 GB: none.
    expect(f1 * (23.75 - held)).toBeLessThan(8)
    // Less free than the model and the margin: not there; the idle model is unloaded first.
    const third = planLoad(
      [loaded('a', 8, on([0], held)), loaded('b', 8, { ...on([0], f2 * (23.75 - held)), last_used_ms: 9 })],
      want('c', 8, {}, 'sglang'),
      box(gpu(0, 24, 23.75 - held - f2 * (23.75 - held))),
      true,
    )
    expect(third).toMatchObject({ do: 'load', gpus: [0], unload: [{ name: 'a', why: LRU_WHY }] })
  })

  test('SGLang tensor parallel: one fraction of the fullest GPU’s free memory, held on each; a set fraction must hold the weights', () => {
    const plan = planLoad(
      [],
      want('big', 20, { tp_size: 2 }, 'sglang'),
      box(gpu(0, 24, 20), gpu(1, 24, 16)),
      true,
    )
    // 10 GB on each of the 16 free on the fuller GPU: 0.625 + 0.03, up to a hundredth.
    const f = 0.66
    expect(plan).toMatchObject({ do: 'load', gpus: [0, 1], extra_params: { mem_fraction_static: f } })
    expect((plan as any).claim_gb).toBeCloseTo(f * 16)
    // A profile's own fraction of what is free must leave its weights room: 0.5 of the 12 GB another
    // process left is not 8 GB (it waits), 0.5 of 20 GB is.
    const own = want('a', 8, { mem_fraction_static: 0.5 }, 'sglang')
    expect(planLoad([], own, box(gpu(0, 24, 12)), true)).toMatchObject({ do: 'wait', blockers: [] })
    const there = planLoad([], own, box(gpu(0, 24, 20)), true)
    expect(there).toMatchObject({ do: 'load', gpus: [0], extra_params: {} })
    expect((there as any).claim_gb).toBeCloseTo(10)
  })

  test('a launched model of no declared size holds a whole GPU, and is unloaded first', () => {
    expect(planLoad([], want('u', null, {}, 'vllm'), box(gpu(0), gpu(1)), true)).toMatchObject({
      gpus: [0],
      claim_gb: 24,
      extra_params: {},
    })
    const models = [
      loaded('a', 10, { ...on([0], 11), last_used_ms: 0 }),
      loaded('u', null, { gpus: [1], claim_gb: null, last_used_ms: 99 }),
    ]
    expect(
      planLoad(models, want('c', 20, {}, 'vllm'), box(gpu(0, 24, 13), gpu(1, 24, 2)), true),
    ).toMatchObject({
      gpus: [1],
      unload: [{ name: 'u', why: UNSIZED_WHY }],
    })
  })

  test('vLLM or SGLang launched without {params} takes its default fraction: its model holds whole GPUs whatever its vram_gb', () => {
    // vLLM takes 0.9 of the GPU: an 8 GB model is charged the whole GPU, not 8 GB of it.
    const first = planLoad([], want('a', 8, {}, 'vllm', false), box(gpu(0), gpu(1)), true)
    expect(first).toMatchObject({ do: 'load', gpus: [0], claim_gb: 24, extra_params: {} })
    // A second goes to the other GPU, and a third finds no room beside them: the idle one goes.
    const a = loaded('a', 8, { ...on([0], 24), last_used_ms: 1 })
    expect(planLoad([a], want('b', 8, {}, 'vllm', false), box(gpu(0, 24, 2), gpu(1)), true)).toMatchObject({
      gpus: [1],
      unload: [],
    })
    const b = loaded('b', 8, { ...on([1], 24), last_used_ms: 2 })
    expect(
      planLoad([a, b], want('c', 8, {}, 'sglang', false), box(gpu(0, 24, 2), gpu(1, 24, 2)), true),
    ).toMatchObject({ gpus: [0], unload: [{ name: 'a', why: LRU_WHY }] })
    // A model larger than a GPU still never fits.
    expect(planLoad([], want('big', 30, {}, 'vllm', false), box(gpu(0), gpu(1)), true)).toEqual({
      do: 'fail',
      why: 'big needs 30 GB on each of 1 GPU, the largest GPU of this worker holds 24 GB',
    })
  })

  test('llama.cpp takes as few GPUs as the model fits on, split when one is not enough; unsized: every GPU', () => {
    expect(planLoad([], want('small', 10), box(gpu(0), gpu(1)), true)).toMatchObject({
      gpus: [0],
      claim_gb: 10,
    })
    expect(planLoad([], want('large', 40), box(gpu(0), gpu(1)), true)).toMatchObject({
      gpus: [0, 1],
      claim_gb: 20,
    })
    expect(planLoad([], want('huge', 50), box(gpu(0), gpu(1)), true)).toEqual({
      do: 'fail',
      why: "huge needs 50 GB of VRAM, this worker's 2 GPUs hold 48 GB",
    })
    expect(planLoad([], want('u', null), box(gpu(0), gpu(1)), true)).toMatchObject({
      gpus: [0, 1],
      claim_gb: 24,
    })
  })

  test('restricted to some GPUs (--gpus), only those are placed on', () => {
    expect(planLoad([], want('a', 10, {}, 'vllm'), box(gpu(2), gpu(5)), true)).toMatchObject({ gpus: [2] })
    expect(planLoad([], want('a', 10, {}, 'vllm'), box(), true)).toEqual({
      do: 'fail',
      why: 'a needs a GPU, this worker has none',
    })
  })
})

describe('copies of a model (rule 2a: docs/worker.md "GPUs")', () => {
  // 20 GB of a 24 GB GPU, with the margin.
  const f = 0.87
  const on = (gpus: number[]) => ({ gpus, claim_gb: f * 24 })
  const gamma = want('gamma', 20, {}, 'vllm')

  test('every copy in use: one more on a GPU none of its copies uses, unloading an idle model there', () => {
    const models = [
      loaded('gamma', 20, { ...on([0]), in_use: 1 }),
      loaded('beta', 20, { ...on([1]), last_used_ms: 5 }),
    ]
    expect(planCopy(models, gamma, box(gpu(0, 24, 3), gpu(1, 24, 3)), 'gamma#2')).toMatchObject({
      do: 'load',
      gpus: [1],
      unload: [{ name: 'beta', why: LRU_WHY }],
      extra_params: { gpu_memory_utilization: f },
    })
    // Still being loaded for a job counts as in use.
    expect(
      planCopy(
        [loaded('gamma', 20, { ...on([0]), state: 'loading' })],
        gamma,
        box(gpu(0, 24, 3), gpu(1)),
        'gamma#2',
      ),
    ).toMatchObject({ do: 'load', gpus: [1], unload: [] })
  })

  test('no copy to make: one is idle, the other GPUs are held by models in use, its copies cover every GPU, or no GPUs', () => {
    const busy = loaded('gamma', 20, { ...on([0]), in_use: 1 })
    expect(
      planCopy(
        [busy, loaded('gamma#2', 20, { model: 'gamma', ...on([1]) })],
        gamma,
        box(gpu(0), gpu(1)),
        'gamma#3',
      ),
    ).toBeNull()
    expect(
      planCopy(
        [busy, loaded('beta', 20, { ...on([1]), in_use: 2 })],
        gamma,
        box(gpu(0, 24, 3), gpu(1, 24, 3)),
        'gamma#2',
      ),
    ).toBeNull()
    // Small enough to fit twice on one GPU: a copy there would serve nothing more.
    expect(
      planCopy(
        [loaded('small', 8, { gpus: [0], claim_gb: 9, in_use: 1 })],
        want('small', 8, {}, 'vllm'),
        box(gpu(0)),
        'small#2',
      ),
    ).toBeNull()
    expect(planCopy([busy], gamma, budget(48), 'gamma#2')).toBeNull()
    // Not loaded at all: the model itself is placed (planLoad), not a copy.
    expect(planCopy([], gamma, box(gpu(0), gpu(1)), 'gamma#2')).toBeNull()
  })

  test('a job uses the copy fewest jobs use (the model’s own on a tie); any loaded copy before waiting on one loading', () => {
    const own = loaded('gamma', 20, { ...on([0]), in_use: 2 })
    const copy = loaded('gamma#2', 20, { model: 'gamma', ...on([1]), in_use: 1 })
    expect(planSelf([own, copy], gamma, true)).toEqual({ do: 'use', instance: 'gamma#2' })
    expect(planSelf([{ ...own, in_use: 1 }, copy], gamma, true)).toEqual({ do: 'use', instance: 'gamma' })
    expect(planSelf([{ ...own, state: 'loading' }, copy], gamma, true)).toEqual({
      do: 'use',
      instance: 'gamma#2',
    })
    expect(planSelf([{ ...own, state: 'loading' }], gamma, true)).toMatchObject({
      do: 'wait',
      why: 'gamma is being loaded',
    })
  })
})
