// A closed-loop HTTP load generator in its own thread, so the server's event loop only serves.
// Message in: { requests: {url, headers, body}[] (one per connection), concurrency, durationMs }.
// Message out: { count, errors, latenciesMs (sampled) }.

declare const self: Worker

interface Job {
  requests: { url: string; headers: Record<string, string>; body?: string; method?: string }[]
  concurrency: number
  durationMs: number
}

self.onmessage = async (event: MessageEvent<Job>) => {
  const { requests, concurrency, durationMs } = event.data
  const deadline = performance.now() + durationMs
  let count = 0
  let errors = 0
  const latencies: number[] = []
  await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      const r = requests[i % requests.length]!
      while (performance.now() < deadline) {
        const t0 = performance.now()
        try {
          const res = await fetch(r.url, { method: r.method ?? 'POST', headers: r.headers, body: r.body })
          await res.arrayBuffer()
          if (res.status >= 400) errors++
        } catch {
          errors++
        }
        count++
        if (count % 16 === 0) latencies.push(performance.now() - t0)
      }
    }),
  )
  postMessage({ count, errors, latenciesMs: latencies })
}
