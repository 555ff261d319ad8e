import { log } from '../../lib/logger'
import type { BatchSignal, SignalsStore } from '../signals'
import type { PgDb } from './db'

const CHANNEL = 'gridkeep_batches'
/** NOTIFY payloads must stay under 8,000 bytes; the rest of a tick's signals go in the next one. */
const MAX_PAYLOAD_BYTES = 7_500

/**
 * Signals of one tick that say the same thing once: a `claimable` per model and needs (held polls
 * look at those, not the batch), a `models_changed` per scope, the latest `progress` per batch.
 */
function keyOf(signal: BatchSignal): string | null {
  switch (signal.kind) {
    case 'claimable':
      return `claimable:${signal.model}:${signal.needs?.join(',') ?? '*'}`
    case 'models_changed':
      return `models_changed:${signal.scope}`
    case 'progress':
      return `progress:${signal.batch_id}`
    default:
      return null
  }
}

/** The tick's signals in order, each repeated one kept once (in the place of its first). */
export function coalesceSignals(signals: BatchSignal[]): BatchSignal[] {
  const out: BatchSignal[] = []
  const at = new Map<string, number>()
  for (const s of signals) {
    const key = keyOf(s)
    const i = key === null ? undefined : at.get(key)
    if (i !== undefined) out[i] = s
    else {
      if (key !== null) at.set(key, out.length)
      out.push(s)
    }
  }
  return out
}

/**
 * NOTIFY/LISTEN on one channel; Bun's client keeps one dedicated LISTEN connection per instance and
 * re-subscribes after a reconnect. Each payload names its sender, so an instance skips its own.
 * The signals published in one tick of the event loop travel together (coalesced, in one statement
 * of NOTIFYs of ≤ 7,500 bytes each): a drain of small validations sends a few NOTIFYs, not three per batch.
 */
export function postgresSignals(db: PgDb, instanceId: string): SignalsStore {
  let pending: BatchSignal[] = []
  let flushed: Promise<void> | undefined
  const payloadOf = (signals: BatchSignal[]) => JSON.stringify({ from: instanceId, signals })
  const flush = async () => {
    const signals = coalesceSignals(pending)
    pending = []
    flushed = undefined
    if (signals.length === 0) return
    const payloads: string[] = []
    let chunk: BatchSignal[] = []
    for (const s of signals) {
      if (chunk.length > 0 && payloadOf([...chunk, s]).length > MAX_PAYLOAD_BYTES) {
        payloads.push(payloadOf(chunk))
        chunk = []
      }
      chunk.push(s)
    }
    payloads.push(payloadOf(chunk))
    // One statement for every chunk: one round trip, delivered in this order.
    const calls = payloads.map((_, i) => `pg_notify($1, $${i + 2})`).join(', ')
    await db.$client.unsafe(`SELECT ${calls}`, [CHANNEL, ...payloads])
  }
  return {
    publish(signal) {
      pending.push(signal)
      flushed ??= new Promise<void>((resolve) => setImmediate(resolve)).then(flush)
      return flushed
    },
    async subscribe(onSignal) {
      const sub = await db.$client.listen(CHANNEL, (payload) => {
        try {
          const { from, signals } = JSON.parse(payload) as { from: string; signals: BatchSignal[] }
          if (from !== instanceId) for (const signal of signals) onSignal(signal)
        } catch (e) {
          log.warn('ignored a malformed batch signal', { error: e instanceof Error ? e.message : String(e) })
        }
      })
      return () => sub.unlisten()
    },
  }
}
