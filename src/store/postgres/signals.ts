import { log } from '../../lib/logger'
import type { BatchSignal, SignalsStore } from '../signals'
import type { PgDb } from './db'

const CHANNEL = 'gridkeep_batches'

/**
 * NOTIFY/LISTEN on one channel; Bun's client keeps one dedicated LISTEN connection per instance and
 * re-subscribes after a reconnect. Each payload names its sender, so an instance skips its own.
 */
export function postgresSignals(db: PgDb, instanceId: string): SignalsStore {
  return {
    async publish(signal) {
      await db.$client.notify(CHANNEL, JSON.stringify({ from: instanceId, signal }))
    },
    async subscribe(onSignal) {
      const sub = await db.$client.listen(CHANNEL, (payload) => {
        try {
          const { from, signal } = JSON.parse(payload) as { from: string; signal: BatchSignal }
          if (from !== instanceId) onSignal(signal)
        } catch (e) {
          log.warn('ignored a malformed batch signal', { error: e instanceof Error ? e.message : String(e) })
        }
      })
      return () => sub.unlisten()
    },
  }
}
