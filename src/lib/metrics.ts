import { Counter, Gauge, Registry } from 'prom-client'
import pkg from '../../package.json'
import { createHttpMetrics } from './http-metrics'

// Prometheus metrics (docs/api.md §10, docs/operations.md "Metrics"), one registry per server so tests that build several
// apps in one process never share counts. Modules increment these directly; gauges that describe
// stored state (batches by status, workers by status) are computed at scrape time by the
// metrics module. Names follow Prometheus conventions: gridkeep_ prefix, _total for counters,
// base units (seconds, bytes).

export function createMetrics() {
  const registry = new Registry()
  const registers = [registry]
  new Gauge({
    name: 'gridkeep_build_info',
    help: 'Always 1; the labels name the running build',
    labelNames: ['version', 'bun_version'] as const,
    registers,
  }).set({ version: pkg.version, bun_version: Bun.version }, 1)
  /** Every HTTP request, counted once when its response is complete (src/app.ts). */
  const http = createHttpMetrics(registry, [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])
  return {
    registry,
    http,
    /** Set at scrape time from the database (src/modules/metrics). */
    batches: new Gauge({
      name: 'gridkeep_batches',
      help: 'Stored batches by status',
      labelNames: ['status'] as const,
      registers,
    }),
    /** Set at scrape time; status is the read-time liveness (stored online and seen recently). */
    workers: new Gauge({
      name: 'gridkeep_workers',
      help: 'Registered workers by liveness status and reported activity',
      labelNames: ['status', 'activity'] as const,
      registers,
    }),
    /** Set at scrape time: docs/api.md §14 fair share, the queue as the owners waiting see it. */
    queuedBatches: new Gauge({
      name: 'gridkeep_queued_batches',
      help: 'Validated batches waiting for a worker, by owner class: idle (the owner has nothing in progress) or running',
      labelNames: ['owner_class'] as const,
      registers,
    }),
    /** Set at scrape time (docs/api.md §16): shards waiting, running, and done in batches still running. */
    shards: new Gauge({
      name: 'gridkeep_shards',
      help: 'Shards of split batches by state (done: of batches still in progress)',
      labelNames: ['state'] as const,
      registers,
    }),
    /** Shards handed out by POST /workers/poll (docs/api.md §16). */
    shardClaims: new Counter({
      name: 'gridkeep_shard_claims_total',
      help: 'Shards claimed by workers',
      registers,
    }),
    /**
     * docs/api.md §16 backup copies, by outcome: started (handed out by POST /workers/poll), won (its
     * upload completed the shard), lost (the holder's did), promoted (the holder ended; the backup
     * holds the shard now), failed (the backup ended without results).
     */
    shardBackups: new Counter({
      name: 'gridkeep_shard_backups_total',
      help: 'Backup copies of running shards, by outcome: started, won, lost, promoted, failed',
      labelNames: ['outcome'] as const,
      registers,
    }),
    /** Successful claims by POST /workers/poll. */
    claims: new Counter({
      name: 'gridkeep_batch_claims_total',
      help: 'Batches claimed by workers',
      registers,
    }),
    /** Requeues (and terminal failures) by reason: reported_failure, worker_silent, worker_reregistered, worker_removed. */
    requeues: new Counter({
      name: 'gridkeep_batch_requeues_total',
      help: 'Batches released from a worker, by reason and outcome (requeued or failed)',
      labelNames: ['reason', 'outcome'] as const,
      registers,
    }),
    /**
     * docs/api.md §7 upload-results: the prompt tokens of the results the server accepted (a whole
     * batch's, or a shard's as it arrives; a repeat upload counts nothing), the `prompt_tokens` of
     * their usage; the cached ones beside them, so that a rate of one over the other is the share
     * of prompt tokens the engines served from their cache.
     */
    promptTokens: new Counter({
      name: 'gridkeep_prompt_tokens_total',
      help: 'Prompt tokens of the results accepted by upload-results',
      registers,
    }),
    cachedPromptTokens: new Counter({
      name: 'gridkeep_cached_prompt_tokens_total',
      help: 'Of the prompt tokens of the results accepted by upload-results, those the engines served from their cache',
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
    /** Set at scrape time: the bytes of stored files by purpose (docs/api.md §15). */
    storedBytes: new Gauge({
      name: 'gridkeep_stored_bytes',
      help: 'Bytes of stored files by purpose (batch: uploads; batch_output: output and error files)',
      labelNames: ['purpose'] as const,
      registers,
    }),
    /** Files deleted by the retention pass (docs/api.md §15), by purpose. */
    filesExpired: new Counter({
      name: 'gridkeep_files_expired_total',
      help: 'Files deleted by the retention pass because they expired, by purpose',
      labelNames: ['purpose'] as const,
      registers,
    }),
    /** docs/api.md §13: webhook delivery attempts by outcome; gave_up counts events whose retries ended. */
    webhookDeliveries: new Counter({
      name: 'gridkeep_webhook_deliveries_total',
      help: 'Webhook delivery attempts by outcome (delivered, failed, refused) and events given up (gave_up)',
      labelNames: ['outcome'] as const,
      registers,
    }),
    /** Open batch event streams. */
    sseStreamsOpen: new Gauge({
      name: 'gridkeep_sse_streams_open',
      help: 'Open batch event streams',
      registers,
    }),
  }
}

export type Metrics = ReturnType<typeof createMetrics>
