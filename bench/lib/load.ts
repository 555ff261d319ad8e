import { readFileSync } from 'node:fs'

export interface LoadResult {
  count: number
  errors: number
  perSecond: number
  p50Ms: number
}

/** Runs the closed-loop load generator in a worker thread for `durationMs`. */
export function load(
  requests: { url: string; headers: Record<string, string>; body?: string; method?: string }[],
  concurrency: number,
  durationMs: number,
): Promise<LoadResult> {
  const worker = new Worker(new URL('./load-worker.ts', import.meta.url).href)
  return new Promise((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<{ count: number; errors: number; latenciesMs: number[] }>) => {
      worker.terminate()
      const sorted = e.data.latenciesMs.sort((a, b) => a - b)
      resolve({
        count: e.data.count,
        errors: e.data.errors,
        perSecond: e.data.count / (durationMs / 1000),
        p50Ms: sorted[Math.floor(sorted.length / 2)] ?? 0,
      })
    }
    worker.onerror = (e) => reject(e)
    worker.postMessage({ requests, concurrency, durationMs })
  })
}

/**
 * CPU time the main thread (where the servers under test run; load comes from a worker thread) has
 * used, in µs, from /proc at clock-tick resolution; undefined where /proc is not there. Throughput
 * on a 2-core machine also depends on the load generator sharing the cores; CPU per request does
 * not.
 */
export function mainThreadCpuMicros(): number | undefined {
  try {
    const stat = readFileSync(`/proc/${process.pid}/task/${process.pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    // utime and stime, fields 14 and 15 of proc(5), in ticks of 1/100 s.
    return (Number(fields[11]) + Number(fields[12])) * 10_000
  } catch {
    return undefined
  }
}

export const quick = process.argv.includes('--quick') || process.env.BENCH_QUICK === '1'

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0
}

export const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })

/** 64 (or any number of) pollers drain `url` from a worker thread; the job ids they got, and the seconds it took. */
export function drain(
  url: string,
  pollers: { headers: Record<string, string>; body: string }[],
): Promise<{ jobIds: string[]; seconds: number }> {
  const worker = new Worker(new URL('./drain-worker.ts', import.meta.url).href)
  return new Promise((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<{ jobIds: string[]; seconds: number }>) => {
      worker.terminate()
      resolve(e.data)
    }
    worker.onerror = (e) => reject(e)
    worker.postMessage({ url, pollers })
  })
}
