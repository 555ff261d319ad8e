import { Counter, Gauge, Registry } from 'prom-client'

// Prometheus metrics (issue 6, API.md §10), one registry per server so tests that build several
// apps in one process never share counts. Modules increment these directly; gauges that describe
// stored state (batches by status, workers by status) are computed at scrape time by the
// metrics module. Names follow Prometheus conventions: gridkeep_ prefix, _total for counters,
// base units (seconds, bytes).

export function createMetrics() {
  const registry = new Registry()
  const registers = [registry]
  return {
    registry,
    /** Successful claims by POST /workers/poll. */
    claims: new Counter({
      name: 'gridkeep_batch_claims_total',
      help: 'Batches claimed by workers',
      registers,
    }),
    /** Requeues (and terminal failures) by reason: reported_failure, worker_silent, worker_reregistered. */
    requeues: new Counter({
      name: 'gridkeep_batch_requeues_total',
      help: 'Batches released from a worker, by reason and outcome (requeued or failed)',
      labelNames: ['reason', 'outcome'] as const,
      registers,
    }),
    /** Input lines read by the validator. */
    validationLines: new Counter({
      name: 'gridkeep_validation_lines_total',
      help: 'Batch input lines read by the validator',
      registers,
    }),
    /** Passes of the sweeper. */
    sweeperPasses: new Counter({ name: 'gridkeep_sweeper_passes_total', help: 'Sweeper passes', registers }),
    /** Open batch event streams. */
    sseStreamsOpen: new Gauge({
      name: 'gridkeep_sse_streams_open',
      help: 'Open batch event streams',
      registers,
    }),
  }
}

export type Metrics = ReturnType<typeof createMetrics>
