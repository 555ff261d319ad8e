// What to do so that a job's model can serve it (docs/worker.md "VRAM budget"), decided once here as
// a pure rule over the model manager's table (models/manager.ts applies it).
//
// 1. A model needing more than the whole budget never fits: the job fails ("needs X GB, this
//    worker has Y GB") and its batch is requeued for a bigger worker.
// 2. Loaded with the job's params (or params the daemon cannot know or apply): use it.
// 3. Being loaded or unloaded: wait for that to end.
// 4. Loaded with other params: it is unloaded and loaded again — once no job uses it.
// 5. Fits beside what is loaded (each model counts its `vram_gb`; null counts nothing, as the
//    server's Poll rule 2 lets it fit): load it.
// 6. Else unload models no job uses, least recently used first, until it fits: load it.
// 7. Else (the room is held by models jobs are using): wait until such a job is done with its
//    model, then decide again. A model is never unloaded under a job using it.
// No budget (no GPU probed and no --vram-gb) means unlimited: nothing is unloaded for room.

export interface TableModel {
  name: string
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
}

export interface ModelWant {
  name: string
  vram_gb: number | null
  params_key: string
}

export type LoadPlan =
  | { do: 'use' }
  | { do: 'load'; unload: { name: string; why: string }[] }
  | { do: 'wait'; why: string; blockers: string[] }
  | { do: 'fail'; why: string }

export const LRU_WHY = 'least recently used, no job needs it'
const EPSILON = 1e-9

const gb = (n: number) => `${Math.round(n * 100) / 100} GB`

/**
 * The plan for `want` given the models that take room now, the budget (GB; null = unlimited) and
 * whether the engine applies params at all (an attached engine does not: any loaded copy serves).
 */
export function planLoad(
  models: readonly TableModel[],
  want: ModelWant,
  budget: number | null,
  appliesParams: boolean,
): LoadPlan {
  const need = want.vram_gb ?? 0
  if (budget !== null && need > budget + EPSILON)
    return { do: 'fail', why: `${want.name} needs ${gb(need)} of VRAM, this worker has ${gb(budget)}` }

  const self = models.find((m) => m.name === want.name)
  const unload: { name: string; why: string }[] = []
  if (self) {
    if (self.state !== 'loaded')
      return {
        do: 'wait',
        why: `${want.name} is being ${self.state === 'loading' ? 'loaded' : 'unloaded'}`,
        blockers: [],
      }
    if (!appliesParams || self.params_key === null || self.params_key === want.params_key)
      return { do: 'use' }
    if (self.in_use > 0)
      return {
        do: 'wait',
        why: `${want.name} is loaded with other params and in use by ${jobs(self.in_use)}`,
        blockers: [want.name],
      }
    unload.push({ name: want.name, why: 'loaded with other params' })
  }

  const others = models.filter((m) => m.name !== want.name)
  const usedNow = others.reduce((sum, m) => sum + (m.vram_gb ?? 0), 0)
  let used = usedNow
  const fits = () => budget === null || used + need <= budget + EPSILON
  if (fits()) return { do: 'load', unload }

  const idle = others
    .filter((m) => m.state === 'loaded' && m.in_use === 0)
    .sort((a, b) => a.last_used_ms - b.last_used_ms || a.name.localeCompare(b.name))
  for (const m of idle) {
    if (fits()) break
    // A model of unknown size frees nothing the budget can count: it stays.
    if (!m.vram_gb) continue
    unload.push({ name: m.name, why: LRU_WHY })
    used -= m.vram_gb
  }
  if (fits()) return { do: 'load', unload }

  const blockers = others.filter((m) => m.in_use > 0 || m.state !== 'loaded')
  const held = blockers
    .map((m) => (m.state === 'loaded' ? `${m.name} in use by ${jobs(m.in_use)}` : `${m.name} ${m.state}`))
    .join(', ')
  return {
    do: 'wait',
    why: `${want.name} needs ${gb(need)}, ${gb(Math.max(0, (budget ?? 0) - usedNow))} free of ${gb(budget ?? 0)}${held ? ` (${held})` : ''}`,
    blockers: blockers.map((m) => m.name),
  }
}

const jobs = (n: number) => (n === 1 ? '1 job' : `${n} jobs`)

/** One string per set of params, whatever the key order: what a loaded copy was loaded with. */
export function paramsKey(params: Record<string, unknown>): string {
  return JSON.stringify(
    Object.keys(params)
      .sort()
      .map((k) => [k, params[k]]),
  )
}
