import type { Deps } from '../deps'
import type { CredentialState } from '../http/credential-cache'
import type { BatchEventsState } from '../lib/batch-events'
import { log } from '../lib/logger'
import type { CatalogueState } from '../modules/catalogue/view'
import type { PollState } from '../modules/workers/waiters'
import type { BatchSignal } from '../store/signals'

// Batch events across instances (docs/api.md §12): a client streaming a batch's events from one
// instance while another validates it. This process's validation events are forwarded as signals;
// the other instances' signals are turned into events for this process's open streams, the final
// ones read from the database (the signal is only a wake-up: src/store/signals.ts).

export function start(
  deps: Deps & BatchEventsState & CatalogueState & CredentialState & PollState,
): () => Promise<void> {
  const { batchEvents: bus, store } = deps
  const forward = (signal: BatchSignal) =>
    store.signals.publish(signal).catch((e) => log.warn('batch signal not sent', { error: e }))
  const stopForwarding = bus.onPublish((batchId, e) => {
    if (e.event === 'progress') void forward({ kind: 'progress', batch_id: batchId, ...e.data })
    else if (e.event === 'done') void forward({ kind: 'validated', batch_id: batchId })
  })

  const onSignal = async (signal: BatchSignal) => {
    // Another instance changed what GET /v1/models answers, or the catalogue polls match against:
    // the next request here reads afresh.
    if (signal.kind === 'models_changed') {
      if (signal.scope === 'catalogue') deps.store.catalogue.forgetCatalogue()
      return deps.catalogueView.drop(signal.scope)
    }
    // A key or user changed elsewhere: the next request here with that credential reads afresh.
    if (signal.kind === 'credentials_changed') return deps.credentials.forget(signal.ids)
    const batchId = signal.batch_id
    // A batch became claimable elsewhere: held polls here look again (docs/api.md §7 wait_seconds).
    if (signal.kind === 'claimable') return deps.pollWaiters.notify(signal.model, signal.needs)
    if (bus.listenerCount(batchId) === 0) return
    if (signal.kind === 'progress') {
      bus.deliver(batchId, {
        event: 'progress',
        data: { lines_read: signal.lines_read, errors_total: signal.errors_total },
      })
    } else if (signal.kind === 'validated') {
      const batch = await deps.store.batches.get(batchId, null)
      if (!batch || batch.status === 'validating') return
      const stored = (await deps.store.batches.errorsOf([batchId])).get(batchId) ?? []
      for (const e of stored) {
        bus.deliver(batchId, {
          event: 'error',
          data: { code: e.code, line: e.line, field: e.field, message: e.message },
        })
      }
      bus.deliver(batchId, {
        event: 'done',
        data: {
          batch_id: batchId,
          status: batch.status,
          request_counts: {
            total: batch.request_counts_total,
            completed: batch.request_counts_completed,
            failed: batch.request_counts_failed,
          },
          errors_total: batch.errors_total,
        },
      })
    }
  }
  const subscribed = store.signals.subscribe((signal) => {
    onSignal(signal).catch((e) => log.warn('batch signal not handled', { error: e }))
  })
  return async () => {
    stopForwarding()
    await (await subscribed)()
  }
}
