import type { Registry } from 'prom-client'

// The two per-request metrics (docs/api.md §10): gridkeep_http_requests_total and
// gridkeep_http_request_duration_seconds, by method, route pattern and status. Every request
// records both, so they are kept as plain numbers here and written out at scrape time: a
// prom-client child hashes its label object on every inc() and observe() (about a tenth of a
// cached read's cost). The series set is small: route patterns, never paths.

const LABELS = ['method', 'route', 'status'] as const
/** The methods requests are counted under; any other is counted as OTHER (bounded labels). */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'OTHER']
const OTHER = METHODS.length - 1

interface Series {
  labels: Record<(typeof LABELS)[number], string>
  count: number
  sum: number
  /** Observations per bucket, not cumulative; the last slot is beyond the highest bound. */
  perBucket: number[]
}

interface Value {
  labels: Record<string, string | number>
  value: number
  metricName?: string
}

/** The registry's view of one metric: what prom-client's Registry reads at scrape time. */
interface Collected {
  name: string
  help: string
  type: 'counter' | 'histogram'
  aggregator: 'sum'
  get(): Promise<{ name: string; help: string; type: string; aggregator: 'sum'; values: Value[] }>
  reset(): void
}

export function createHttpMetrics(registry: Registry, bounds: number[]) {
  const series = new Set<Series>()
  const byRoute = new Map<string, Map<number, Series>>()
  const collected = (
    name: string,
    help: string,
    type: Collected['type'],
    values: () => Value[],
  ): Collected => {
    const metric: Collected = {
      name,
      help,
      type,
      aggregator: 'sum',
      get: async () => ({ name, help, type, aggregator: 'sum', values: values() }),
      reset: () => {
        series.clear()
        byRoute.clear()
      },
    }
    registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0])
    return metric
  }
  const requests = collected(
    'gridkeep_http_requests_total',
    'HTTP requests by method, route pattern (never the raw path) and status',
    'counter',
    () => [...series.values()].map((s) => ({ labels: s.labels, value: s.count })),
  )
  const duration = collected(
    'gridkeep_http_request_duration_seconds',
    'HTTP request latency by method, route pattern and status',
    'histogram',
    () =>
      [...series.values()].flatMap((s) => {
        let cumulative = 0
        const buckets = bounds.map((le, i) => {
          cumulative += s.perBucket[i]!
          return { labels: { le, ...s.labels }, value: cumulative, metricName: `${duration.name}_bucket` }
        })
        return [
          ...buckets,
          { labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${duration.name}_bucket` },
          { labels: s.labels, value: s.sum, metricName: `${duration.name}_sum` },
          { labels: s.labels, value: s.count, metricName: `${duration.name}_count` },
        ]
      }),
  )
  return {
    requests,
    duration,
    /** Counts one request of (method, route pattern, status) that took `seconds`. */
    record(requestMethod: string, route: string, status: number, seconds: number) {
      const found = METHODS.indexOf(requestMethod)
      const m = found < 0 ? OTHER : found
      const method = METHODS[m]!
      // Keyed without building a string per request: route patterns are the router's own strings.
      let ofRoute = byRoute.get(route)
      if (!ofRoute) {
        ofRoute = new Map()
        byRoute.set(route, ofRoute)
      }
      const key = status * 16 + m
      let s = ofRoute.get(key)
      if (!s) {
        s = {
          labels: { method, route, status: String(status) },
          count: 0,
          sum: 0,
          perBucket: bounds.map(() => 0),
        }
        s.perBucket.push(0)
        ofRoute.set(key, s)
        series.add(s)
      }
      s.count++
      s.sum += seconds
      let i = 0
      while (i < bounds.length && seconds > bounds[i]!) i++
      s.perBucket[i]!++
    },
  }
}
