import type { BatchRow, BatchStatus } from '../db/schema'

// docs/api.md §6 "Batch status", as data. These five are the only states; `cancelling`, `cancelled`,
// `expired` and `finalizing` are never produced. Every status change goes through one guarded
// UPDATE rendered from this table by each storage engine (src/store/sqlite/transition.ts,
// src/store/postgres/queue.ts), so no move outside it can be written.
//
//   validating  ← POST /v1/batches creates it; left by the validator (src/services/validator.ts)
//   validated   ← validation passed, or a requeue; left when POST /workers/poll claims it
//   in_progress ← claimed; left by upload-results, report-failure or the sweeper
//   completed   terminal
//   failed      terminal (validation errors, or the last attempt failed)

export const BATCH_STATUSES = ['validating', 'validated', 'in_progress', 'completed', 'failed'] as const

/** docs/api.md §6: when a batch was created and when it entered in_progress, completed or failed (null: not yet). */
export interface StateTimes {
  created_at: number
  in_progress_at: number | null
  completed_at: number | null
  failed_at: number | null
}

/** Not yet terminal: such a batch still needs its input file (docs/api.md §5 file_in_use). */
export const NON_TERMINAL_STATUSES = ['validating', 'validated', 'in_progress'] as const

export const BATCH_TRANSITIONS = {
  validation_passed: { from: 'validating', to: 'validated', by: 'asynchronous validation finds no errors' },
  validation_failed: { from: 'validating', to: 'failed', by: 'asynchronous validation finds errors' },
  claimed: { from: 'validated', to: 'in_progress', by: 'POST /workers/poll: a compatible worker claims it' },
  requeued: {
    from: 'in_progress',
    to: 'validated',
    by: 'report-failure, the sweeper or re-registration, attempts after increment below the maximum',
  },
  attempts_exhausted: {
    from: 'in_progress',
    to: 'failed',
    by: 'report-failure, the sweeper or re-registration on the last attempt',
  },
  results_delivered: { from: 'in_progress', to: 'completed', by: 'POST /workers/upload-results' },
} as const satisfies Record<string, { from: BatchStatus; to: BatchStatus; by: string }>

export type BatchEvent = keyof typeof BATCH_TRANSITIONS

export type BatchChanges = Partial<Omit<BatchRow, 'seq' | 'id' | 'status' | 'updated_at'>>
