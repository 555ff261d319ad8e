// A stand-in for `nvidia-smi` on a simulated GPU box (test/helpers/gpubox.ts), run by bun as its own
// process: `bun test/helpers/fake-nvidia-smi.ts BOX_DIR [nvidia-smi's arguments]`; the box's
// `bin/nvidia-smi` script calls it so, first on the daemon's PATH.
//
// - The box: `BOX_DIR/box.json` lists the GPUs ({index, uuid, name, total_mib}) and the weights of
//   each model the stand-in engines serve (`weights_gb`, by served name); what the GPUs hold is
//   `BOX_DIR/held/<pid>.json` ({pid, gpus, mib}: `mib[i]` held on `gpus[i]`), written by the
//   processes that hold GPU memory (fake-vllm.ts's engine core). A holder counts while its process
//   runs: memory is given back when the process that holds it is gone, as the driver does.
// - `--query-gpu=F1,F2,… --format=csv,noheader,nounits` prints one line per GPU with the fields
//   asked, in that order (index, uuid, name, memory.total, memory.used, memory.free,
//   utilization.gpu, driver_version); used counts the driver's own reserve (RESERVED_MIB), as a
//   real card's does at rest. Without arguments: the banner, with its CUDA version.

import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

export interface BoxGpu {
  index: number
  uuid: string
  name: string
  total_mib: number
}

export interface Holder {
  pid: number
  gpus: number[]
  /** What it holds on each of `gpus`, in their order (each GPU's own share of its own total). */
  mib: number[]
  /** The model whose engine core holds it. */
  model?: string
}

/** What the driver keeps for itself on each GPU (a real 24 GB card reports ~400 MiB used at rest). */
export const RESERVED_MIB = 256
const DRIVER = '550.54.14'

export interface Box {
  gpus: BoxGpu[]
  /** The weights of each model (GB, by served name): what its engine must place before its cache. */
  weights_gb?: Record<string, number>
}

export const readBox = (box: string): Box => JSON.parse(readFileSync(join(box, 'box.json'), 'utf8'))

/** Whether the process runs (a zombie holds nothing). */
export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return false
  }
}

/** The holders whose process runs. */
export function liveHolders(box: string): Holder[] {
  const out: Holder[] = []
  let files: string[] = []
  try {
    files = readdirSync(join(box, 'held'))
  } catch {}
  for (const f of files) {
    if (!f.endsWith('.json')) continue
    try {
      const h = JSON.parse(readFileSync(join(box, 'held', f), 'utf8')) as Holder
      if (running(h.pid)) out.push(h)
    } catch {}
  }
  return out
}

/** Each GPU with what is used and free on it now (MiB). */
export function gpuState(box: string): (BoxGpu & { used_mib: number; free_mib: number })[] {
  const gpus = readBox(box).gpus
  const holders = liveHolders(box)
  return gpus.map((g) => {
    const used =
      RESERVED_MIB +
      holders.reduce((a, h) => {
        const at = h.gpus.indexOf(g.index)
        return at < 0 ? a : a + (h.mib[at] ?? 0)
      }, 0)
    return { ...g, used_mib: used, free_mib: Math.max(0, g.total_mib - used) }
  })
}

if (import.meta.main) {
  const [box, ...args] = process.argv.slice(2)
  const query = args.find((a) => a.startsWith('--query-gpu='))
  if (!query) {
    console.log(`| NVIDIA-SMI ${DRIVER}              Driver Version: ${DRIVER}      CUDA Version: 12.4     |`)
    process.exit(0)
  }
  const fields = query.slice('--query-gpu='.length).split(',')
  for (const g of gpuState(box!)) {
    const value: Record<string, string | number> = {
      index: g.index,
      uuid: g.uuid,
      name: g.name,
      'memory.total': g.total_mib,
      'memory.used': g.used_mib,
      'memory.free': g.free_mib,
      'utilization.gpu': g.used_mib > RESERVED_MIB ? 50 : 0,
      driver_version: DRIVER,
    }
    console.log(fields.map((f) => value[f] ?? '[N/A]').join(', '))
  }
}
