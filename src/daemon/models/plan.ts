import { placementParams, profileGpuCount } from '../../domain/gpu-fit'

// Where to load a job's model and what to unload first (docs/worker.md "GPUs"), decided once here as
// a pure rule over the model manager's table and the daemon's GPU ledger (models/manager.ts applies
// it). A resource is a ledger of units, not a sum (Ollama's server/sched.go, GPUStack's policies):
// one row per GPU, and each loaded model holds its share on the GPUs it was placed on.
//
// What a model asks of the GPUs (wants()):
// - Its GPU count (src/domain/gpu-fit.ts, the server's rule too): its tensor-parallel size times its
//   pipeline-parallel size (`tensor_parallel_size` × `pipeline_parallel_size` for vLLM, `tp_size` ×
//   `pp_size` for SGLang), else 1; llama.cpp splits a model over its device list, so it takes as
//   few GPUs as it fits on.
// - Its share of each: `vram_gb ÷ GPUs`. The engines take a fraction of the GPU whatever the model
//   needs, each by its own rule, so when the profile does not set the fraction the daemon derives one
//   (rounded up to a hundredth, FRACTION_MARGIN added) and the model holds what it takes:
//   · vLLM's `gpu_memory_utilization` is of each GPU's TOTAL memory (its V1 engine, vLLM 0.9.1 on: a
//     per-instance limit, and that much must be free at its start): `vram_gb ÷ GPUs ÷ the smallest
//     GPU's total + margin`; it holds that fraction of each GPU's total.
//   · SGLang's `mem_fraction_static` is of the memory FREE before it loads (SGLang 0.4–0.5
//     profile_max_num_token: its cache gets `fraction × free before the load − the weights`, the
//     free figure the smallest of its GPUs'), so memory another model holds counts against it:
//     `vram_gb ÷ GPUs ÷ the free memory of the set's fullest GPU + margin` (the free memory as the
//     placement sees it, after what it unloads); it holds that fraction of that free memory on each.
//     A fraction above 1 does not fit there.
//   A profile that sets the fraction holds what it sets (of the total, or of the free memory). A model
//   with no vram_gb holds whole GPUs (its GPU count of them; llama.cpp: every GPU); so does a vLLM or
//   SGLang model whose launch command has no {params}: it cannot be told a fraction, and the engine
//   takes its default one (vLLM 0.9 of each GPU) whatever the model's size.
//
// What is free on a GPU: the smaller of what the driver reports free and its total less the shares
// of the models this daemon placed on it (a model still loading shows in the second before the
// driver sees it; another process's memory in the first).
//
// The rule:
// 1. A model whose share can never fit (more GPUs than the worker has, or more per GPU than the
//    largest holds) fails: the job fails with both figures and its batch is requeued.
// 2. Loaded with the job's params (or params the daemon cannot know or apply): use it — of its
//    copies, the one fewest jobs use.
// 2a. Copies (planCopy): a job claimed for a spare GPU (docs/api.md §7 placement rule 5) whose model
//    is in use on every copy it has: one more copy, on GPUs none of its copies uses, where it fits by
//    rules 5 and 6; else rule 2.
// 3. Being loaded or unloaded: wait for that to end.
// 4. Loaded with other params: it is unloaded and loaded again — once no job uses it.
// 5. GPUs where it fits beside what is loaded: load it there, on those with the most free first
//    (Ollama's order: spreading keeps each model's GPUs to itself while there is room).
// 6. Else unload, per GPU, models no job uses — those of no declared size first (they hold whole
//    GPUs), then the least recently used — on the GPUs that need the fewest unloaded: load it there.
// 7. Else (the room is held by models jobs are using, or being loaded): wait until such a job is done
//    with its model, then decide again. A model is never unloaded under a job using it.
// Without GPUs the ledger is one budget (--vram-gb) placed in no GPU set; with neither, no limit:
// nothing is unloaded for room.

export interface TableModel {
  /** The model's name, or a further copy's (engines/types.ts copyName). */
  name: string
  /** The model a further copy serves; absent for the model's own row. */
  model?: string
  /** Only models that take room: loaded, or being loaded or unloaded. */
  state: 'loaded' | 'loading' | 'unloading'
  /** What it was loaded for (the job's vram_gb); null when unknown or not declared. */
  vram_gb: number | null
  /** Jobs whose requests use it now. */
  in_use: number
  /** When a job last used it (ms); the LRU order. */
  last_used_ms: number
  /** The params it was loaded with (paramsKey); null when unknown (loaded before this daemon knew). */
  params_key: string | null
  /** The GPUs it was placed on (ledger indices); null when unknown or placed in no GPU set. */
  gpus: number[] | null
  /** What it holds on each of them, GB; null when unknown (then vram_gb over its GPUs, or whole GPUs). */
  claim_gb: number | null
}

/** One GPU of the ledger. */
export interface GpuRoom {
  /** nvidia-smi's index. */
  index: number
  total_gb: number
  /** What the driver reports free now; null when it reports nothing. */
  free_gb: number | null
}

/** The room a daemon places models in: its GPUs, or one budget (GB; null = no limit). */
export type Room = { gpus: readonly GpuRoom[] } | { budget_gb: number | null }

export interface ModelWant {
  name: string
  vram_gb: number | null
  params_key: string
  /** GPUs it takes (its tensor-parallel size); null: as few as it fits on (llama.cpp). */
  gpu_count: number | null
  /** The share of each GPU the profile sets (gpu_memory_utilization, mem_fraction_static); null: none. */
  fraction: number | null
  /** Whether the daemon passes the engine a fraction of its own (fraction_key) when the profile sets none. */
  fraction_key: string | null
  /**
   * What the engine's fraction is of: each GPU's total memory (vLLM), or the memory free on it when
   * the engine starts (SGLang); null: the engine takes no fraction.
   */
  fraction_of: 'total' | 'free' | null
  /**
   * It holds whole GPUs: no declared size and no fraction, or an engine that takes its own default
   * fraction whatever its vram_gb, the daemon unable to give it one (a vLLM or SGLang launch command
   * without {params}). Decided once, by wants().
   */
  whole: boolean
}

export interface Unload {
  name: string
  why: string
}

export type LoadPlan =
  /** `instance`: the copy the job uses (the model's own name for its first). */
  | { do: 'use'; instance: string }
  | {
      do: 'load'
      unload: Unload[]
      /** The GPU set (ledger indices); null: no GPU set (a budget, or no limit). */
      gpus: number[] | null
      /** What it will hold on each of them, GB; null with no limit. */
      claim_gb: number | null
      /** Params the daemon adds: the fraction it derived (`{gpu_memory_utilization: 0.45}`). */
      extra_params: Record<string, number>
      /** Why these GPUs, for the log. */
      why: string
    }
  | { do: 'wait'; why: string; blockers: string[] }
  | { do: 'fail'; why: string }

export const LRU_WHY = 'least recently used, no job needs it'
export const UNSIZED_WHY = 'no declared size (it holds whole GPUs), no job needs it'
/**
 * Added to a derived memory fraction: room for what the engine holds beyond the model's own figure
 * (its CUDA context, buffers of its collective operations), and for a vram_gb that is an estimate.
 */
export const FRACTION_MARGIN = 0.03
/** What an engine given a whole GPU takes of it by default (vLLM's gpu_memory_utilization default). */
export const WHOLE_GPU_SHARE = 0.9
const EPSILON = 1e-9

/** The model a row serves. */
export const modelOf = (m: Pick<TableModel, 'name' | 'model'>) => m.model ?? m.name

const gb = (n: number) => `${Math.round(n * 100) / 100} GB`
const jobs = (n: number) => (n === 1 ? '1 job' : `${n} jobs`)
const gpuWord = (n: number) => (n === 1 ? '1 GPU' : `${n} GPUs`)
const list = (gpus: readonly number[]) => gpus.join(', ')

/**
 * What the model of a job asks of the GPUs, from the engine that serves it and the profile's params
 * (docs/worker.md "GPUs"). `derives`: the engine is started with the daemon's params (launched with
 * {params}), so a fraction the daemon derives reaches it.
 */
export function wants(
  engine: string,
  params: Record<string, unknown>,
  derives: boolean,
  vram_gb: number | null,
): Pick<ModelWant, 'gpu_count' | 'fraction' | 'fraction_key' | 'fraction_of' | 'whole'> {
  // The GPU count and the params that place a model are the server's rule too (docs/api.md §7 Poll
  // rule 2): one place decides them (domain/gpu-fit.ts).
  const gpu_count = profileGpuCount(engine, params)
  const placed = placementParams(engine)
  if (!placed)
    return { gpu_count, fraction: null, fraction_key: null, fraction_of: null, whole: vram_gb === null }
  // Without {params} neither the profile's fraction nor one of the daemon's reaches the engine: it
  // takes its own default of each GPU.
  if (!derives)
    return { gpu_count, fraction: null, fraction_key: null, fraction_of: placed.fraction_of, whole: true }
  const v = params[placed.fraction]
  const fraction = typeof v === 'number' && v > 0 && v <= 1 ? v : null
  return {
    gpu_count,
    fraction,
    fraction_key: placed.fraction,
    fraction_of: placed.fraction_of,
    whole: vram_gb === null && fraction === null,
  }
}

/** One GPU as the rule sees it. */
interface Slot {
  index: number
  total: number
  driverFree: number | null
  /** The shares of the models placed on it. */
  held: { model: TableModel; gb: number }[]
}

/**
 * The plan for `want` given the models that take room now, the room, and whether the engine
 * applies params at all (an attached engine does not: any loaded copy serves).
 */
export function planLoad(
  models: readonly TableModel[],
  want: ModelWant,
  room: Room,
  appliesParams: boolean,
): LoadPlan {
  const decided = planSelf(models, want, appliesParams)
  if (decided) return decided
  const self = models.find((m) => m.name === want.name)
  const unload: Unload[] = []
  if ('budget_gb' in room) {
    if (room.budget_gb === null) {
      if (self) unload.push({ name: want.name, why: 'loaded with other params' })
      return { do: 'load', unload, gpus: null, claim_gb: null, extra_params: {}, why: 'no VRAM limit' }
    }
    return placeIn(
      models,
      { ...want, gpu_count: 1, fraction: null, fraction_key: null, fraction_of: null },
      slotsOf(models, [{ index: 0, total_gb: room.budget_gb, free_gb: null }], true),
      true,
    )
  }
  if (room.gpus.length === 0) return { do: 'fail', why: `${want.name} needs a GPU, this worker has none` }
  return placeIn(models, want, slotsOf(models, room.gpus, false), false)
}

/**
 * Rules 2–4 alone, which need no room: the plan when the model is loaded (on one copy or more),
 * being loaded or unloaded, or in use with other params; null when it must be placed (planLoad).
 */
export function planSelf(
  models: readonly TableModel[],
  want: Pick<ModelWant, 'name' | 'params_key'>,
  appliesParams: boolean,
): LoadPlan | null {
  const copies = models.filter((m) => modelOf(m) === want.name)
  const usable = copies
    .filter(
      (m) =>
        m.state === 'loaded' && (!appliesParams || m.params_key === null || m.params_key === want.params_key),
    )
    .sort((a, b) => a.in_use - b.in_use || Number(a.name !== want.name) - Number(b.name !== want.name))
  if (usable[0]) return { do: 'use', instance: usable[0].name }
  const changing = copies.find((m) => m.state !== 'loaded')
  if (changing)
    return {
      do: 'wait',
      why: `${want.name} is being ${changing.state === 'loading' ? 'loaded' : 'unloaded'}`,
      blockers: [],
    }
  const self = copies.find((m) => m.name === want.name)
  if (!self) return null
  if (self.in_use > 0)
    return {
      do: 'wait',
      why: `${want.name} is loaded with other params and in use by ${jobs(self.in_use)}`,
      blockers: [want.name],
    }
  return null
}

/**
 * Rule 2a: one more copy of a model every copy of which is in use (or being loaded), for a job
 * claimed for a spare GPU (docs/worker.md "GPUs", copies): named `name`, placed by rules 5 and 6 on
 * GPUs none of its copies uses. Null when there is no such copy to make now: a copy is idle, one is
 * being unloaded, its copies' GPUs are not known, or it fits nowhere without waiting (the job then
 * uses a copy it has).
 */
export function planCopy(
  models: readonly TableModel[],
  want: ModelWant,
  room: Room,
  name: string,
): LoadPlan | null {
  if (!('gpus' in room)) return null
  const copies = models.filter((m) => modelOf(m) === want.name)
  if (
    copies.length === 0 ||
    copies.some((m) => m.state === 'unloading' || m.gpus === null || (m.state === 'loaded' && m.in_use === 0))
  )
    return null
  const taken = new Set(copies.flatMap((m) => m.gpus!))
  const gpus = room.gpus.filter((g) => !taken.has(g.index))
  if (gpus.length === 0) return null
  const others = models.filter((m) => modelOf(m) !== want.name)
  const plan = placeIn(others, { ...want, name }, slotsOf(others, gpus, false), false)
  return plan.do === 'load' ? plan : null
}

/** The ledger: each GPU with the shares placed on it (a model of unknown GPUs on every one). */
function slotsOf(models: readonly TableModel[], gpus: readonly GpuRoom[], budget: boolean): Slot[] {
  const slots = gpus.map((g) => ({
    index: g.index,
    total: g.total_gb,
    driverFree: g.free_gb,
    held: [] as Slot['held'],
  }))
  for (const m of models) {
    const on = budget || m.gpus === null ? slots : slots.filter((s) => m.gpus!.includes(s.index))
    for (const s of on) {
      const share = m.claim_gb ?? (m.vram_gb === null ? s.total : m.vram_gb / on.length)
      s.held.push({ model: m, gb: Math.min(s.total, share) })
    }
  }
  return slots
}

/** A slot's room once `gone` are unloaded: by the daemon's own shares, and by the driver's figure. */
function roomOn(s: Slot, gone: ReadonlySet<string>): { byShares: number; byDriver: number | null } {
  let held = 0
  let freed = 0
  for (const h of s.held) {
    if (gone.has(h.model.name)) freed += h.gb
    else held += h.gb
  }
  return { byShares: s.total - held, byDriver: s.driverFree === null ? null : s.driverFree + freed }
}

/** What is free on a slot once `gone` are unloaded: the smaller of the two figures. */
function freeOn(s: Slot, gone: ReadonlySet<string> = new Set()): number {
  const r = roomOn(s, gone)
  return Math.max(0, r.byDriver === null ? r.byShares : Math.min(r.byDriver, r.byShares))
}

/**
 * Whether `need` fits on a slot once `gone` are unloaded. A model of no declared size holds the
 * whole GPU: none of the daemon's shares may be there, and the driver must report what such an
 * engine takes by default (WHOLE_GPU_SHARE of it; the driver always keeps a little for itself).
 */
function fitsOn(s: Slot, gone: ReadonlySet<string>, need: number, whole: boolean): boolean {
  const r = roomOn(s, gone)
  if (r.byShares + EPSILON < need) return false
  const driverNeed = whole ? WHOLE_GPU_SHARE * s.total : need
  return r.byDriver === null || r.byDriver + EPSILON >= driverNeed
}

/**
 * What `want` holds on each GPU of `set` (GB), and the fraction the daemon derives for it; null when
 * it cannot be given a fraction there (more than all of it). `free`: each GPU's free memory as the
 * placement sees it (what an engine whose fraction is of the free memory, SGLang, is given).
 */
function shareOn(
  want: ModelWant,
  set: readonly Slot[],
  budget: boolean,
  free: (s: Slot) => number,
): { per: Map<number, number>; extra: Record<string, number> } | null {
  const n = set.length
  const per = new Map<number, number>()
  // SGLang's fraction is of the smallest free memory of its GPUs (its ranks agree on one figure).
  const base = (s: Slot) =>
    want.fraction_of === 'free' ? Math.min(...set.map(free)) : want.fraction_of === 'total' ? s.total : 0
  if (want.fraction !== null) {
    for (const s of set) per.set(s.index, want.fraction * base(s))
    // Its weights must fit in what it takes of the free memory (SGLang: else "Not enough memory").
    if (
      want.fraction_of === 'free' &&
      want.vram_gb !== null &&
      want.fraction * base(set[0]!) < want.vram_gb / n
    )
      return null
    return { per, extra: {} }
  }
  if (want.whole || want.vram_gb === null) {
    // Whole GPUs, each of which must still hold its share of a declared size.
    if (want.vram_gb !== null && set.some((s) => s.total + EPSILON < want.vram_gb! / n)) return null
    for (const s of set) per.set(s.index, s.total)
    return { per, extra: {} }
  }
  if (want.fraction_key && !budget) {
    // vLLM: the smallest GPU's total decides (each then holds that fraction of its own total).
    const of = want.fraction_of === 'free' ? base(set[0]!) : Math.min(...set.map((s) => s.total))
    if (of <= 0) return null
    const f = Math.ceil((want.vram_gb / n / of + FRACTION_MARGIN) * 100 - EPSILON) / 100
    if (f > 1) return null
    for (const s of set) per.set(s.index, f * base(s))
    return { per, extra: { [want.fraction_key]: f } }
  }
  for (const s of set) per.set(s.index, want.vram_gb / n)
  return { per, extra: {} }
}

/** The models no job uses on `s`, in the order they are unloaded: unsized first, then LRU. */
function idleOn(s: Slot, want: string): TableModel[] {
  return s.held
    .map((h) => h.model)
    .filter((m) => m.name !== want && m.state === 'loaded' && m.in_use === 0)
    .sort(
      (a, b) =>
        Number(a.vram_gb !== null) - Number(b.vram_gb !== null) ||
        a.last_used_ms - b.last_used_ms ||
        a.name.localeCompare(b.name),
    )
}

interface Choice {
  set: Slot[]
  gone: Set<string>
  per: Map<number, number>
  extra: Record<string, number>
}

/**
 * The best set of `n` GPUs for `want` with `gone` already unloaded (the job's own stale copy):
 * first those where it fits now, most free first; else the fewest unloads (unsized, then LRU, per
 * GPU). Null when no set can be made to fit by unloading idle models.
 */
function choose(
  want: ModelWant,
  slots: Slot[],
  n: number,
  base: Set<string>,
  budget: boolean,
): Choice | null {
  if (n > slots.length) return null
  const whole = want.whole
  // Each GPU on its own: what it would take to fit there (unloads), and what would be left.
  const ranked = slots
    .map((s) => {
      const gone = new Set(base)
      // Its share there as if the set were all like it (the smallest GPU decides a fraction: checked
      // again below with the set chosen), with what is unloaded so far.
      const need = () =>
        shareOn(
          want,
          Array.from({ length: n }, () => s),
          budget,
          (x) => freeOn(x, gone),
        )?.per.get(s.index) ?? Number.POSITIVE_INFINITY
      const idle = idleOn(s, want.name)
      const dropped: TableModel[] = []
      while (!fitsOn(s, gone, need(), whole) && idle.length) {
        const m = idle.shift()!
        gone.add(m.name)
        dropped.push(m)
      }
      return {
        s,
        gone,
        fits: fitsOn(s, gone, need(), whole),
        after: freeOn(s, gone) - need(),
        // What its unloads cost: sized models lost, and how recently the newest of them was used.
        sized: dropped.filter((m) => m.vram_gb !== null).length,
        newest: Math.max(Number.NEGATIVE_INFINITY, ...dropped.map((m) => m.last_used_ms)),
      }
    })
    .filter((r) => r.fits)
    .sort(
      (a, b) =>
        a.gone.size - b.gone.size ||
        a.sized - b.sized ||
        a.newest - b.newest ||
        b.after - a.after ||
        a.s.index - b.s.index,
    )
  if (ranked.length < n) return null
  const picked = ranked.slice(0, n)
  const set = picked.map((r) => r.s).sort((a, b) => a.index - b.index)
  const gone = new Set(base)
  for (const r of picked) for (const g of r.gone) gone.add(g)
  const share = shareOn(want, set, budget, (x) => freeOn(x, gone))
  if (!share) return null
  // A model unloaded for one GPU frees its share on its others too; with the set's own share
  // (its smallest GPU's), every GPU of the set must still fit.
  for (const s of set) if (!fitsOn(s, gone, share.per.get(s.index)!, whole)) return null
  return { set, gone, per: share.per, extra: share.extra }
}

function placeIn(models: readonly TableModel[], want: ModelWant, slots: Slot[], budget: boolean): LoadPlan {
  const self = models.find((m) => m.name === want.name)
  const base = new Set<string>(self ? [want.name] : [])
  const counts =
    want.gpu_count !== null
      ? [want.gpu_count]
      : want.vram_gb === null
        ? [slots.length]
        : slots.map((_, i) => i + 1)

  // 1. Never fits: too many GPUs, or a share no GPU of the worker holds even empty.
  const empty = (s: Slot): Slot => ({ ...s, held: [], driverFree: null })
  const everFits = counts.some((n) => choose(want, slots.map(empty), n, new Set(), budget) !== null)
  if (!everFits) return { do: 'fail', why: neverFits(want, slots, counts, budget) }

  // 5. Fits beside what is loaded (fewest GPUs first: llama.cpp spreads only as far as it must).
  let best: Choice | null = null
  for (const n of counts) {
    const c = choose(want, slots, n, base, budget)
    if (c && c.gone.size === base.size) {
      best = c
      break
    }
    // 6. Else the fewest unloads.
    if (c && (!best || c.gone.size < best.gone.size)) best = c
  }
  if (best) {
    const unload: Unload[] = []
    if (self) unload.push({ name: want.name, why: 'loaded with other params' })
    const byName = new Map(models.map((m) => [m.name, m]))
    for (const name of best.gone)
      if (name !== want.name)
        unload.push({ name, why: byName.get(name)!.vram_gb === null ? UNSIZED_WHY : LRU_WHY })
    const claim = Math.max(...best.per.values())
    return {
      do: 'load',
      unload,
      gpus: budget ? null : best.set.map((s) => s.index),
      claim_gb: Math.round(claim * 1000) / 1000,
      extra_params: best.extra,
      why: budget ? `${gb(claim)} of the ${gb(slots[0]!.total)} budget` : chosenWhy(best, unload.length > 0),
    }
  }

  // 7. The room is held by models in use or being loaded: wait for them.
  const blockers = models.filter((m) => m.name !== want.name && (m.in_use > 0 || m.state !== 'loaded'))
  const held = blockers
    .map((m) => (m.state === 'loaded' ? `${m.name} in use by ${jobs(m.in_use)}` : `${m.name} ${m.state}`))
    .join(', ')
  return {
    do: 'wait',
    why: waitWhy(want, slots, counts, budget, held),
    blockers: blockers.map((m) => m.name),
  }
}

function chosenWhy(c: Choice, unloading: boolean): string {
  const each = c.set.map((s) => `GPU ${s.index}: ${gb(c.per.get(s.index)!)} of ${gb(s.total)}`).join(', ')
  const frac = Object.entries(c.extra)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ')
  return `on ${c.set.length === 1 ? 'GPU' : 'GPUs'} ${list(c.set.map((s) => s.index))} (${each}${frac ? `; ${frac}` : ''})${unloading ? '' : ', where it fits beside what is loaded, most free first'}`
}

function neverFits(want: ModelWant, slots: Slot[], counts: number[], budget: boolean): string {
  if (budget) {
    const need = want.vram_gb ?? 0
    return `${want.name} needs ${gb(need)} of VRAM, this worker has ${gb(slots[0]!.total)}`
  }
  const n = counts[0]!
  const largest = Math.max(...slots.map((s) => s.total))
  if (want.gpu_count !== null && n > slots.length)
    return `${want.name} needs ${gpuWord(n)}, this worker has ${gpuWord(slots.length)}`
  if (want.fraction !== null)
    return `${want.name} asks for ${want.fraction} of each of ${gpuWord(n)}, which no ${gpuWord(n)} of this worker can give`
  const per = (want.vram_gb ?? 0) / (want.gpu_count ?? slots.length)
  return want.gpu_count === null
    ? `${want.name} needs ${gb(want.vram_gb ?? 0)} of VRAM, this worker's ${gpuWord(slots.length)} hold ${gb(slots.reduce((a, s) => a + s.total, 0))}`
    : `${want.name} needs ${gb(per)} on each of ${gpuWord(n)}, the largest GPU of this worker holds ${gb(largest)}`
}

function waitWhy(want: ModelWant, slots: Slot[], counts: number[], budget: boolean, held: string): string {
  if (budget) {
    const need = want.vram_gb ?? slots[0]!.total
    return `${want.name} needs ${gb(need)}, ${gb(freeOn(slots[0]!))} free of ${gb(slots[0]!.total)}${held ? ` (${held})` : ''}`
  }
  const n = counts[0]!
  // What it would hold on empty GPUs (an engine whose fraction is of the free memory: all of it free).
  const share = shareOn(want, slots.slice(0, Math.min(n, slots.length)), false, (x) => x.total)
  const need = share ? Math.max(...share.per.values()) : 0
  const free = slots.map((s) => `GPU ${s.index} ${gb(freeOn(s))} free`).join(', ')
  const what = want.gpu_count === null ? 'GPUs' : gpuWord(n)
  return `${want.name} needs ${what} with ${gb(need)} free each; ${free}${held ? ` (${held})` : ''}`
}

/** One string per set of params, whatever the key order: what a loaded copy was loaded with. */
export function paramsKey(params: Record<string, unknown>): string {
  return JSON.stringify(
    Object.keys(params)
      .sort()
      .map((k) => [k, params[k]]),
  )
}
