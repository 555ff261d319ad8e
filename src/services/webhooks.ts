import { createHmac } from 'node:crypto'
import type { WebhookAttemptRow } from '../db/schema'
import type { Deps } from '../deps'
import { type Every, every } from '../lib/clock'
import { newId } from '../lib/ids'
import { log } from '../lib/logger'
import { hostOf, resolveTarget, type Target } from '../modules/webhooks/urls'
import type { AttemptResult, LeasedMessage } from '../store/webhooks'
import { guarded, startInterval } from './interval'

// Webhook delivery (docs/api.md §13, Standard Webhooks). The outbox rows are written with the batch
// transitions (src/store/*/webhooks.ts); this loop leases the due ones and POSTs them, at least
// once, outside any transaction and off the request path: a slow or dead receiver holds one of
// WEBHOOK_CONCURRENCY slots for at most WEBHOOK_TIMEOUT_SECONDS, never an API request or a claim.
// runOnce() is one pass that waits for its attempts (tests drive it with a manual clock); start()
// ticks every second and returns stop().

/**
 * The retry schedule: after the n-th failed attempt the next comes RETRY_BASE_SECONDS × 2^(n-1)
 * later (at most RETRY_CAP_SECONDS), times a jitter factor in [0.8, 1.2); an attempt that would
 * fall later than RETRY_WINDOW_SECONDS after the event gives up instead. Without jitter: 0, 1 min,
 * 3 min, 7 min, 15 min, 31 min, 63 min, 2 h 7 min, 4 h 15 min, 8 h 31 min, 14 h 31 min,
 * 20 h 31 min: 12 attempts, then gave_up.
 */
/** Webhook deliveries this server has in flight (WEBHOOK_CONCURRENCY). */
export interface DeliveryState {
  webhooksInFlight: Set<Promise<unknown>>
}

export const RETRY_BASE_SECONDS = 60
export const RETRY_CAP_SECONDS = 6 * 3600
export const RETRY_WINDOW_SECONDS = 24 * 3600

/** When to try again after `failedAttempts` failures, or null to give up (the schedule above). */
export function nextAttemptAt(
  createdAt: number,
  failedAttempts: number,
  now: number,
  random: () => number = Math.random,
): number | null {
  const delay = Math.min(RETRY_BASE_SECONDS * 2 ** (failedAttempts - 1), RETRY_CAP_SECONDS)
  const next = now + Math.round(delay * (0.8 + 0.4 * random()))
  return next > createdAt + RETRY_WINDOW_SECONDS ? null : next
}

/** Standard Webhooks' signature: `v1,` + base64 HMAC-SHA256 of "id.timestamp.body" keyed with the secret's bytes. */
export function sign(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64')
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`
}

export interface DeliveryOptions {
  /** The jitter's random source (tests fix it to read the schedule exactly). */
  random?: () => number
}

export type AttemptOutcome = WebhookAttemptRow['outcome'] | 'gave_up' | 'lost_lease'

// A lease outlasts the request's timeout and the bookkeeping around it; a deliverer that died
// mid-attempt leaves its messages due again once it lapses.
const leaseSeconds = (deps: Deps & DeliveryState) => deps.config.WEBHOOK_TIMEOUT_SECONDS * 2 + 1

/** Leases up to `limit` due messages and starts their attempts; each promise settles when recorded. */
async function startDue(
  deps: Deps & DeliveryState,
  limit: number,
  options: DeliveryOptions,
): Promise<Promise<AttemptOutcome>[]> {
  if (limit <= 0) return []
  const now = deps.clock.now()
  const leased = await deps.store.webhooks.leaseDue(now, now + leaseSeconds(deps), newId('req_'), limit)
  return leased.map((m) => {
    const p = deliver(deps, m, options).catch((e) => {
      log.error('webhook delivery failed to record', {
        message_id: m.id,
        error: e instanceof Error ? e : String(e),
      })
      return 'lost_lease' as const
    })
    deps.webhooksInFlight.add(p)
    void p.finally(() => deps.webhooksInFlight.delete(p))
    return p
  })
}

/** One pass: every due message (up to WEBHOOK_CONCURRENCY) attempted once; their outcomes. */
export async function runOnce(
  deps: Deps & DeliveryState,
  options: DeliveryOptions = {},
): Promise<AttemptOutcome[]> {
  return Promise.all(await startDue(deps, deps.config.WEBHOOK_CONCURRENCY, options))
}

/**
 * Keeps up to WEBHOOK_CONCURRENCY attempts in flight: every second, and whenever an attempt of a
 * full lease settles (more may be due: a burst drains at the receivers' pace, not one lease a
 * second). stop() awaits the attempts in flight.
 */
export function start(
  deps: Deps & DeliveryState,
  schedule: Every = every,
  options: DeliveryOptions = {},
): () => Promise<void> {
  let stopped = false
  let leasing = false
  let again = false
  const fillOnce = async () => {
    if (stopped || deps.shutdown.signal.aborted) return
    if (leasing) {
      again = true
      return
    }
    leasing = true
    try {
      do {
        again = false
        const free = deps.config.WEBHOOK_CONCURRENCY - deps.webhooksInFlight.size
        const started = await startDue(deps, free, options)
        if (started.length > 0 && started.length === free) for (const p of started) void p.then(fill)
      } while (again)
    } finally {
      leasing = false
    }
  }
  const fill = guarded('webhook', fillOnce)
  const stopTimer = startInterval(deps, { name: 'webhook', seconds: 1, pass: fillOnce }, schedule)
  return async () => {
    stopped = true
    stopTimer()
    await Promise.allSettled([...deps.webhooksInFlight])
  }
}

/** One attempt of one leased message, recorded with the message's next state. */
async function deliver(
  deps: Deps & DeliveryState,
  m: LeasedMessage,
  options: DeliveryOptions,
): Promise<AttemptOutcome> {
  const timestamp = deps.clock.now()
  const started = deps.clock.monotonicMs()
  const body = JSON.stringify({ id: m.id, type: m.type, created_at: m.created_at, data: { id: m.batch_id } })
  let outcome: WebhookAttemptRow['outcome']
  let statusCode: number | null = null
  let error: string | null = null
  const url = new URL(m.url)
  // Resolution counts against the timeout too: a slow resolver holds a slot no longer than a slow receiver.
  const timeoutMs = deps.config.WEBHOOK_TIMEOUT_SECONDS * 1000
  let timer: ReturnType<typeof setTimeout> | undefined
  const target = await Promise.race([
    resolveTarget(url, deps.resolveHost, deps.config.WEBHOOK_ALLOW_PRIVATE),
    new Promise<Target>((resolve) => {
      timer = setTimeout(
        () => resolve({ ok: false, refused: false, reason: `cannot resolve ${hostOf(url)}: timed out` }),
        timeoutMs,
      )
    }),
  ]).finally(() => clearTimeout(timer))
  if (!target.ok) {
    outcome = target.refused ? 'refused' : 'failed'
    error = target.reason
  } else {
    try {
      const res = await post(
        deps,
        url,
        target.address,
        {
          'content-type': 'application/json',
          'user-agent': 'gridkeep-webhooks',
          'webhook-id': m.id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': sign(m.secret, m.id, timestamp, body),
        },
        body,
      )
      statusCode = res.status
      // The receiver's answer is not read beyond its status; the connection is released.
      await res.body?.cancel().catch(() => {})
      outcome = res.ok ? 'delivered' : 'failed'
      if (!res.ok) error = `HTTP ${res.status}`
    } catch (e) {
      outcome = 'failed'
      error =
        e instanceof Error
          ? e.name === 'TimeoutError'
            ? `timed out after ${deps.config.WEBHOOK_TIMEOUT_SECONDS} s`
            : e.message
          : String(e)
    }
  }
  const now = deps.clock.now()
  const next =
    outcome === 'delivered' ? null : nextAttemptAt(m.created_at, m.attempts + 1, now, options.random)
  const result: AttemptResult = {
    attempt: {
      id: newId('whd_'),
      webhook_id: m.webhook_id,
      message_id: m.id,
      batch_id: m.batch_id,
      type: m.type,
      attempted_at: timestamp,
      outcome,
      status_code: statusCode,
      error: error?.slice(0, 500) ?? null,
      duration_ms: Math.max(0, Math.round(deps.clock.monotonicMs() - started)),
    },
    status: outcome === 'delivered' ? 'delivered' : next === null ? 'gave_up' : 'pending',
    next_attempt_at: next,
  }
  if (!(await deps.store.webhooks.recordAttempt(m.id, m.lease, result))) return 'lost_lease'
  deps.metrics.webhookDeliveries.inc({ outcome })
  if (result.status === 'gave_up') deps.metrics.webhookDeliveries.inc({ outcome: 'gave_up' })
  // The URL may carry credentials and the secret signs: neither is logged, only ids.
  log.info('webhook delivery', {
    webhook_id: m.webhook_id,
    message_id: m.id,
    type: m.type,
    outcome,
    status_code: statusCode,
    next_attempt_at: next,
  })
  return result.status === 'gave_up' ? 'gave_up' : outcome
}

/**
 * POSTs to the checked address, not to the name again (DNS rebinding): the URL's host becomes the
 * address, the Host header and the TLS server name stay the name. Redirects are not followed (a
 * redirect could point anywhere; a 3xx is a failed attempt).
 */
function post(
  deps: Deps & DeliveryState,
  url: URL,
  address: string,
  headers: Record<string, string>,
  body: string,
) {
  const host = url.host
  const name = hostOf(url)
  const direct = new URL(url)
  direct.hostname = address.includes(':') ? `[${address}]` : address
  return fetch(direct, {
    method: 'POST',
    headers: { ...headers, host },
    body,
    redirect: 'manual',
    signal: AbortSignal.timeout(deps.config.WEBHOOK_TIMEOUT_SECONDS * 1000),
    tls: url.protocol === 'https:' ? { serverName: name } : undefined,
  })
}
