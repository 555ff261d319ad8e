// GPU discovery through nvidia-smi (docs/api.md §7 Worker → GPU: vendor, name, vram_gb, driver, cuda; the
// heartbeat's utilisation and memory, per GPU), and the GPUs of the daemon's ledger (docs/worker.md
// "GPUs"): each by its index, with its total and free memory as the driver reports them. `--gpus`
// restricts the daemon to some of them. No nvidia-smi, or no GPU, means none is reported and VRAM
// comes from --vram-gb.

import type { Subprocess } from 'bun'
import { log as rootLog } from '../lib/logger'
import { realTimers, type Timers } from './backoff'
import { engineEnv } from './engines/env'

const log = rootLog.child({ component: 'gpu' })

export interface Gpu {
  vendor: string
  name: string
  vram_gb: number
  driver: string
  cuda: string
}

/** One GPU as the driver reports it now (nvidia-smi's index: what CUDA_VISIBLE_DEVICES names). */
export interface GpuDevice {
  index: number
  uuid: string | null
  name: string
  total_gb: number
  used_gb: number
  /** What the driver says is free (total less what every process holds, less what it reserves). */
  free_gb: number
  utilization: number | null
}

export interface GpuSample {
  gpus: Gpu[]
  /** The same GPUs with their memory now, in the same order. */
  devices: GpuDevice[]
  /** Mean utilisation over the GPUs, percent; null when the driver does not report it. */
  utilization: number | null
  memory_used_gb: number
  memory_total_gb: number
}

/** Fields asked of nvidia-smi, in this order. CUDA is not a --query-gpu field; see parseCudaVersion. */
export const GPU_QUERY_FIELDS = [
  'index',
  'uuid',
  'name',
  'memory.total',
  'memory.used',
  'memory.free',
  'utilization.gpu',
  'driver_version',
]

// GiB to 0.1. A card's total is rounded to the nearest (a "24 GB" card reports 24564 MiB and must
// still fit a vram_gb: 24 entry); what is free is rounded down and what is used up, so that the
// ledger never counts memory the driver did not report free (models/plan.ts places by it).
// The 1e-9 keeps a figure that is exact in tenths (24.5) from moving by a floating-point error.
const gib = (mib: number) => Math.round((mib / 1024) * 10) / 10
const gibDown = (mib: number) => Math.floor((mib / 1024) * 10 + 1e-9) / 10
const gibUp = (mib: number) => Math.ceil((mib / 1024) * 10 - 1e-9) / 10

const num = (s: string | undefined): number | null => {
  if (s === undefined) return null
  const n = Number(s.trim())
  // "[N/A]" and "[Not Supported]" are what nvidia-smi prints for fields a GPU lacks.
  return s.trim() === '' || Number.isNaN(n) ? null : n
}

/**
 * Parses `nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits`; with `only`,
 * the GPUs of those indices alone (--gpus).
 */
export function parseNvidiaSmi(csv: string, cuda = '', only?: readonly number[]): GpuSample {
  const gpus: Gpu[] = []
  const devices: GpuDevice[] = []
  let used = 0
  let total = 0
  const utils: number[] = []
  for (const raw of csv.split('\n')) {
    const line = raw.trim()
    if (!line) continue
    const cols = line.split(',').map((c) => c.trim())
    if (cols.length < GPU_QUERY_FIELDS.length) continue
    const [index, uuid, name, memTotal, memUsed, memFree, util, driver] = cols
    const i = num(index)
    if (i === null || (only && !only.includes(i))) continue
    const totalMib = num(memTotal) ?? 0
    const usedMib = num(memUsed) ?? 0
    const u = num(util)
    gpus.push({ vendor: 'nvidia', name: name!, vram_gb: gib(totalMib), driver: driver!, cuda })
    devices.push({
      index: i,
      uuid: uuid?.startsWith('GPU-') ? uuid : null,
      name: name!,
      total_gb: gib(totalMib),
      used_gb: gibUp(usedMib),
      free_gb: gibDown(num(memFree) ?? Math.max(0, totalMib - usedMib)),
      utilization: u,
    })
    total += totalMib
    used += usedMib
    if (u !== null) utils.push(u)
  }
  return {
    gpus,
    devices,
    utilization: utils.length
      ? Math.round((utils.reduce((a, b) => a + b, 0) / utils.length) * 10) / 10
      : null,
    memory_used_gb: gibUp(used),
    memory_total_gb: gib(total),
  }
}

/**
 * The variables that give an engine process its GPU set (docs/worker.md "GPUs"): nvidia-smi's
 * indices, in nvidia-smi's order (CUDA's own default order is fastest first, which is not
 * nvidia-smi's: docs/worker.md "GPUs"). Nothing when the daemon knows no GPUs.
 */
export function gpuEnv(gpus: readonly number[] | null): Record<string, string> {
  if (!gpus) return {}
  return { CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: gpus.join(',') }
}

/** The "CUDA Version: 12.4" of nvidia-smi's banner: the highest CUDA the driver supports. */
export function parseCudaVersion(banner: string): string {
  return /CUDA Version:\s*([0-9.]+)/.exec(banner)?.[1] ?? ''
}

/** A command's output, or why there is none (`missing`: the program is not installed). */
export type CommandResult = string | { failed: string; missing?: boolean }

/** Runs a command with a time limit; null is taken as "not there" (a stand-in's shorthand). */
export type RunCommand = (cmd: string[], timeoutMs: number) => Promise<CommandResult | null>

/**
 * Runs a command with a time limit. A command past it is killed and not waited for: nvidia-smi on a
 * hung driver can sit in the kernel, where no signal ends it until the call returns.
 */
export const runCommand: RunCommand = async (cmd, timeoutMs) => {
  let proc: Subprocess<'ignore', 'pipe', 'pipe'>
  try {
    // Found on the daemon's PATH as it is now, with what an engine may see of its environment
    // (docs/worker.md "What an engine sees"): never the worker key or the hub token.
    proc = Bun.spawn(cmd, { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe', env: engineEnv(process.env) })
  } catch (e) {
    return { failed: `${cmd[0]} could not be run: ${(e as Error).message}`, missing: true }
  }
  let timer: ReturnType<typeof setTimeout> | undefined
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs)
  })
  const done = await Promise.race([
    Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]),
    late,
  ])
  clearTimeout(timer)
  if (!done) {
    proc.kill('SIGKILL')
    return { failed: `${cmd[0]} did not answer within ${timeoutMs / 1000} s` }
  }
  const [out, err, code] = done
  if (code === 0) return out
  const said = err.trim().split('\n').at(-1)
  return { failed: `${cmd[0]} exited with code ${code}${said ? `: ${said}` : ''}` }
}

/** How nvidia-smi is asked (docs/worker.md "GPUs"): each call's time limit, and the start's tries. */
export interface ProbeLimits {
  /** One call's time limit (default 10 s). */
  timeoutMs?: number
  /** Calls at the daemon's start before it gives up (default 3), the waits between them doubling from `backoffMs`. */
  tries?: number
  backoffMs?: number
  timers?: Timers
}

const reasonOf = (r: CommandResult | null): string | null =>
  r === null ? 'nvidia-smi is not there' : typeof r === 'string' ? null : r.failed

/**
 * Probes nvidia-smi, keeping the GPUs of `only` (--gpus) when given. The CUDA version is read once
 * (it cannot change without a driver reload). Every call has a time limit; a failure is logged with
 * its reason when that reason changes (a heartbeat's sample is not retried: the next one is).
 */
export class GpuProbe {
  private cuda: string | undefined
  private lastProblem: string | null = null
  private readonly limits: Required<ProbeLimits>
  constructor(
    private readonly run: RunCommand = runCommand,
    private readonly only?: readonly number[],
    limits: ProbeLimits = {},
  ) {
    this.limits = { timeoutMs: 10_000, tries: 3, backoffMs: 1000, timers: realTimers, ...limits }
  }

  private async query(): Promise<CommandResult | null> {
    const r = await this.run(
      ['nvidia-smi', `--query-gpu=${GPU_QUERY_FIELDS.join(',')}`, '--format=csv,noheader,nounits'],
      this.limits.timeoutMs,
    )
    const problem = reasonOf(r)
    const missing = r === null || (typeof r !== 'string' && r.missing)
    if (problem !== this.lastProblem && problem && !missing)
      log.warn('nvidia-smi failed', { reason: problem })
    this.lastProblem = problem
    return r
  }

  private async parse(csv: string): Promise<GpuSample | null> {
    if (this.cuda === undefined) {
      const banner = await this.run(['nvidia-smi'], this.limits.timeoutMs)
      this.cuda = parseCudaVersion(typeof banner === 'string' ? banner : '')
    }
    const sample = parseNvidiaSmi(csv, this.cuda, this.only)
    return sample.gpus.length ? sample : null
  }

  async sample(): Promise<GpuSample | null> {
    const r = await this.query()
    return typeof r === 'string' ? this.parse(r) : null
  }

  /**
   * docs/worker.md "GPUs": at the start, whether every GPU `--gpus` names is one nvidia-smi lists:
   * null when so, else the line the daemon exits with. nvidia-smi is asked up to `tries` times
   * (a driver still loading after a reboot), each failure logged with its reason and the wait.
   */
  async checkSelected(): Promise<string | null> {
    const only = this.only
    if (!only) return null
    const named = `--gpus ${only.join(',')}`
    const { tries, backoffMs, timers } = this.limits
    let r: CommandResult | null = null
    for (let i = 1; i <= tries; i++) {
      r = await this.query()
      if (typeof r === 'string' || r === null || r.missing || i === tries) break
      const wait = backoffMs * 2 ** (i - 1)
      log.warn('nvidia-smi failed; asking again', { reason: r.failed, try: i, of: tries, retry_in_ms: wait })
      await timers.sleep(wait)
    }
    if (typeof r !== 'string')
      return `${named}: nvidia-smi could not list the GPUs (${reasonOf(r)}${r !== null && !r.missing ? `; ${tries} tries` : ''})`
    const listed = parseNvidiaSmi(r).devices.map((d) => d.index)
    const absent = only.filter((i) => !listed.includes(i))
    if (absent.length === 0) return null
    return `${named}: nvidia-smi lists no GPU ${absent.join(', ')} (${listed.length ? `it lists ${listed.join(', ')}` : 'it lists none'})`
  }
}
