import type { WebhookEventType } from '../db/schema'
import type { BatchEvent } from './batch-states'

// docs/api.md §13: which batch transitions (docs/api.md §6, batch-states.ts) the owner's webhooks hear of.
// A requeue back to validated is no new validation and sends nothing; a batch fails either at
// validation or on its last attempt (report-failure, the sweeper, re-registration).
export const WEBHOOK_EVENT_OF: Partial<Record<BatchEvent, WebhookEventType>> = {
  validation_passed: 'batch.validated',
  validation_failed: 'batch.failed',
  results_delivered: 'batch.completed',
  attempts_exhausted: 'batch.failed',
}
