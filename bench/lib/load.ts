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
