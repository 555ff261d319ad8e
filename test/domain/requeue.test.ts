import { describe, expect, test } from 'bun:test'
import { checkOrgDeletion } from '../../src/domain/org-rules'
import { countsAttempt, removedRequeue, requeueDecision } from '../../src/domain/requeue'

// The requeue rule (src/domain/requeue.ts) and when an org may be deleted (src/domain/org-rules.ts),
// decided once for both engines.

const batch = { id: 'batch_1', attempts: 1, request_counts_total: 10, model: 'm' }

describe('requeueDecision', () => {
  test('a counted requeue adds an attempt; the last one fails the batch', () => {
    expect(requeueDecision(batch, 3, 'boom', 50)).toMatchObject({
      event: 'requeued',
      changes: { attempts: 2, error: 'boom', queued_at: 50 },
      outcome: { status: 'validated', attempts: 2 },
    })
    expect(requeueDecision({ ...batch, attempts: 2 }, 3, 'boom', 50)).toMatchObject({
      event: 'attempts_exhausted',
      changes: { attempts: 3, request_counts_failed: 10, failed_at: 50 },
      outcome: { status: 'failed' },
    })
  })

  test('a removed worker’s batch goes back with its attempts as they were, even on its last one', () => {
    const { reason, error } = removedRequeue({ id: 'wrk_1', name: 'gpu-1' })
    expect(countsAttempt(reason)).toBe(false)
    expect(error).toBe('worker gpu-1 (wrk_1) was removed by an organization admin; not counted as an attempt')
    for (const attempts of [0, 2])
      expect(requeueDecision({ ...batch, attempts }, 3, error, 50, countsAttempt(reason))).toMatchObject({
        event: 'requeued',
        changes: { attempts, request_counts_completed: 0, request_counts_failed: 0, queued_at: 50 },
        outcome: { status: 'validated', attempts },
      })
    for (const other of ['reported_failure', 'worker_silent', 'worker_reregistered'] as const)
      expect(countsAttempt(other)).toBe(true)
  })
})

describe('checkOrgDeletion', () => {
  test('unknown: 404; a Personal Org: 409 personal_org; workers left: 409 org_has_workers; else allowed', () => {
    expect(() => checkOrgDeletion(undefined, 0)).toThrow(expect.objectContaining({ status: 404 }))
    expect(() => checkOrgDeletion({ personal: true }, 0)).toThrow(
      expect.objectContaining({ status: 409, errorCode: 'personal_org' }),
    )
    expect(() => checkOrgDeletion({ personal: false }, 2)).toThrow(
      expect.objectContaining({ status: 409, errorCode: 'org_has_workers' }),
    )
    expect(() => checkOrgDeletion({ personal: false }, 0)).not.toThrow()
  })
})
