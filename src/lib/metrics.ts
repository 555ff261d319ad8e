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
  const counter = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name, help, labelNames, registers })
  const gauge = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Gauge<L>({ name, help, labelNames, registers })
  gauge('gridkeep_build_info', 'Always 1; the labels name the running build', ['version', 'bun_version']).set(
    { version: pkg.version, bun_version: Bun.version },
    1,
  )
  /** Every HTTP request, counted once when its response is complete (src/app.ts). */
  const http = createHttpMetrics(registry, [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])
  return {
    registry,
    http,
    /** Set at scrape time from the database (src/modules/metrics). */
    batches: gauge('gridkeep_batches', 'Stored batches by status', ['status']),
    /** Set at scrape time; status is the read-time liveness (stored online and seen recently). */
    workers: gauge('gridkeep_workers', 'Registered workers by liveness status and reported activity', [
      'status',
      'activity',
    ]),
    /** Set at scrape time: docs/api.md §14 fair share, the queue as the owners waiting see it. */
    queuedBatches: gauge(
      'gridkeep_queued_batches',
      'Validated batches waiting for a worker, by owner class: idle (the owner has nothing in progress) or running',
      ['owner_class'],
    ),
    /** Set at scrape time (docs/api.md §16): shards waiting, running, and done in batches still running. */
    shards: gauge(
      'gridkeep_shards',
      'Shards of split batches by state (done: of batches still in progress)',
      ['state'],
    ),
    /** Shards handed out by POST /workers/poll (docs/api.md §16). */
    shardClaims: counter('gridkeep_shard_claims_total', 'Shards claimed by workers'),
    /**
     * docs/api.md §16 backup copies, by outcome: started (handed out by POST /workers/poll), won (its
     * upload completed the shard), lost (the holder's did), promoted (the holder ended; the backup
     * holds the shard now), failed (the backup ended without results).
     */
    shardBackups: counter(
      'gridkeep_shard_backups_total',
      'Backup copies of running shards, by outcome: started, won, lost, promoted, failed',
      ['outcome'],
    ),
    /** Successful claims by POST /workers/poll. */
    claims: counter('gridkeep_batch_claims_total', 'Batches claimed by workers'),
    /** Requeues (and terminal failures) by reason: reported_failure, worker_silent, worker_reregistered, worker_removed. */
    requeues: counter(
      'gridkeep_batch_requeues_total',
      'Batches released from a worker, by reason and outcome (requeued or failed)',
      ['reason', 'outcome'],
    ),
    /**
     * docs/api.md §7 upload-results: the prompt tokens of the results the server accepted (a whole
     * batch's, or a shard's as it arrives; a repeat upload counts nothing), the `prompt_tokens` of
     * their usage; the cached ones beside them, so that a rate of one over the other is the share
     * of prompt tokens the engines served from their cache.
     */
    promptTokens: counter(
      'gridkeep_prompt_tokens_total',
      'Prompt tokens of the results accepted by upload-results',
    ),
    cachedPromptTokens: counter(
      'gridkeep_cached_prompt_tokens_total',
      'Of the prompt tokens of the results accepted by upload-results, those the engines served from their cache',
    ),
    /** Input lines read by the validator. */
    validationLines: counter('gridkeep_validation_lines_total', 'Batch input lines read by the validator'),
    /** Passes of the sweeper. */
    sweeperPasses: counter('gridkeep_sweeper_passes_total', 'Sweeper passes'),
    /** Set at scrape time: the bytes of stored files by purpose (docs/api.md §15). */
    storedBytes: gauge(
      'gridkeep_stored_bytes',
      'Bytes of stored files by purpose (batch: uploads; batch_output: output and error files)',
      ['purpose'],
    ),
    /** Files deleted by the retention pass (docs/api.md §15), by purpose. */
    filesExpired: counter(
      'gridkeep_files_expired_total',
      'Files deleted by the retention pass because they expired, by purpose',
      ['purpose'],
    ),
    /** docs/api.md §13: webhook delivery attempts by outcome; gave_up counts events whose retries ended. */
    webhookDeliveries: counter(
      'gridkeep_webhook_deliveries_total',
      'Webhook delivery attempts by outcome (delivered, failed, refused) and events given up (gave_up)',
      ['outcome'],
    ),
    /** Open batch event streams. */
    sseStreamsOpen: gauge('gridkeep_sse_streams_open', 'Open batch event streams'),
  }
}

export type Metrics = ReturnType<typeof createMetrics>
