// GPU discovery through nvidia-smi (docs/api.md §7 Worker → GPU: vendor, name, vram_gb, driver, cuda; the
// heartbeat's utilisation and memory). No nvidia-smi, or no GPU, means none is reported and VRAM
// comes from --vram-gb.

export interface Gpu {
  vendor: string
  name: string
  vram_gb: number
  driver: string
  cuda: string
}

export interface GpuSample {
  gpus: Gpu[]
  /** Mean utilisation over the GPUs, percent; null when the driver does not report it. */
  utilization: number | null
  memory_used_gb: number
  memory_total_gb: number
}

/** Fields asked of nvidia-smi, in this order. CUDA is not a --query-gpu field; see parseCudaVersion. */
export const GPU_QUERY_FIELDS = [
  'index',
  'name',
  'memory.total',
  'memory.used',
  'utilization.gpu',
  'driver_version',
]

// GiB, rounded to 0.1: a "24 GB" card reports 24564 MiB and must still fit a vram_gb: 24 entry.
const gib = (mib: number) => Math.round((mib / 1024) * 10) / 10

const num = (s: string | undefined): number | null => {
  if (s === undefined) return null
  const n = Number(s.trim())
  // "[N/A]" and "[Not Supported]" are what nvidia-smi prints for fields a GPU lacks.
  return s.trim() === '' || Number.isNaN(n) ? null : n
}

/** Parses `nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(csv: string, cuda = ''): GpuSample {
  const gpus: Gpu[] = []
  let used = 0
  let total = 0
  const utils: number[] = []
  for (const raw of csv.split('\n')) {
    const line = raw.trim()
    if (!line) continue
    const cols = line.split(',').map((c) => c.trim())
    if (cols.length < GPU_QUERY_FIELDS.length) continue
    const [, name, memTotal, memUsed, util, driver] = cols
    const totalMib = num(memTotal) ?? 0
    gpus.push({ vendor: 'nvidia', name: name!, vram_gb: gib(totalMib), driver: driver!, cuda })
    total += totalMib
    used += num(memUsed) ?? 0
    const u = num(util)
    if (u !== null) utils.push(u)
  }
  return {
    gpus,
    utilization: utils.length
      ? Math.round((utils.reduce((a, b) => a + b, 0) / utils.length) * 10) / 10
      : null,
    memory_used_gb: gib(used),
    memory_total_gb: gib(total),
  }
}

/** The "CUDA Version: 12.4" of nvidia-smi's banner: the highest CUDA the driver supports. */
export function parseCudaVersion(banner: string): string {
  return /CUDA Version:\s*([0-9.]+)/.exec(banner)?.[1] ?? ''
}

export type RunCommand = (cmd: string[]) => Promise<string | null>

/** Runs a command with a time limit; null when it is missing, fails or hangs. */
export const runCommand: RunCommand = async (cmd) => {
  try {
    const proc = Bun.spawn(cmd, { stdout: 'pipe', stderr: 'ignore', timeout: 10_000 })
    const [out, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited])
    return code === 0 ? out : null
  } catch {
    return null
  }
}

/** Probes nvidia-smi. The CUDA version is read once (it cannot change without a driver reload). */
export class GpuProbe {
  private cuda: string | undefined
  constructor(private readonly run: RunCommand = runCommand) {}

  async sample(): Promise<GpuSample | null> {
    const csv = await this.run([
      'nvidia-smi',
      `--query-gpu=${GPU_QUERY_FIELDS.join(',')}`,
      '--format=csv,noheader,nounits',
    ])
    if (csv === null) return null
    if (this.cuda === undefined) this.cuda = parseCudaVersion((await this.run(['nvidia-smi'])) ?? '')
    const sample = parseNvidiaSmi(csv, this.cuda)
    return sample.gpus.length ? sample : null
  }
}
