// Column sets both engines select, named once: each function takes the engine's own table (SQLite's
// or PostgreSQL's schema) and returns its columns under the names the rules above the seam read.

/** `names` maps each name a selection gives to the table's column it reads. */
type Selection<T, M extends Record<string, keyof T>> = { [K in keyof M]: T[M[K]] }

function select<T, const M extends Record<string, keyof T>>(table: T, names: M): Selection<T, M> {
  return Object.fromEntries(
    Object.entries(names).map(([as, column]) => [as, table[column as keyof T]]),
  ) as Selection<T, M>
}

type BatchColumn =
  | 'id'
  | 'status'
  | 'attempts'
  | 'model'
  | 'request_counts_total'
  | 'request_counts_completed'
  | 'request_counts_failed'

/**
 * A batch joined with its assignment, as the holder rule reads it (src/domain/worker-rules.ts
 * checkHolder), with the counts a progress report is checked against (checkProgress, which names
 * the total `total`) and what the requeue rule reads (src/domain/requeue.ts requeueDecision).
 */
export function holdingColumns<
  B extends Record<BatchColumn, unknown>,
  A extends Record<'worker_id' | 'id' | 'completed_at', unknown>,
>(batches: B, assignments: A) {
  return {
    ...select(batches, {
      id: 'id',
      status: 'status',
      attempts: 'attempts',
      model: 'model',
      request_counts_total: 'request_counts_total',
      total: 'request_counts_total',
      completed: 'request_counts_completed',
      failed: 'request_counts_failed',
    }),
    ...select(assignments, {
      holder: 'worker_id',
      assignment_id: 'id',
      assignment_completed_at: 'completed_at',
    }),
  }
}

const HOSTED = ['name', 'runtime', 'digest', 'loaded', 'advertised', 'configured', 'on_disk'] as const

/** What a worker hosts (docs/api.md §7 "hosts"): a worker_models row as the matching reads it. */
export function hostedModelColumns<M extends Record<(typeof HOSTED)[number], unknown>>(
  models: M,
): Pick<M, (typeof HOSTED)[number]> {
  return select(
    models,
    Object.fromEntries(HOSTED.map((c) => [c, c])) as { [C in (typeof HOSTED)[number]]: C },
  )
}
