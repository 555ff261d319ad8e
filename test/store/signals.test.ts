import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { openPostgres, type PgDb } from '../../src/store/postgres/db'
import { coalesceSignals, postgresSignals } from '../../src/store/postgres/signals'
import type { BatchSignal } from '../../src/store/signals'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'

// Signals between instances (docs/api.md §12): the signals of one tick travel coalesced, in one NOTIFY
// per payload-sized chunk.

const claimable = (batch_id: string, model: string): BatchSignal => ({ kind: 'claimable', batch_id, model })

describe('coalesceSignals', () => {
  test('one claimable per model, one models_changed per scope, the latest progress per batch; order kept', () => {
    expect(
      coalesceSignals([
        claimable('b1', 'm'),
        { kind: 'progress', batch_id: 'b9', lines_read: 1, errors_total: 0 },
        { kind: 'validated', batch_id: 'b1' },
        claimable('b2', 'm'),
        { kind: 'models_changed', scope: 'fleet' },
        claimable('b3', 'n'),
        { kind: 'progress', batch_id: 'b9', lines_read: 5, errors_total: 1 },
        { kind: 'validated', batch_id: 'b2' },
        { kind: 'models_changed', scope: 'fleet' },
        { kind: 'models_changed', scope: 'catalogue' },
      ]),
    ).toEqual([
      claimable('b2', 'm'),
      { kind: 'progress', batch_id: 'b9', lines_read: 5, errors_total: 1 },
      { kind: 'validated', batch_id: 'b1' },
      { kind: 'models_changed', scope: 'fleet' },
      claimable('b3', 'n'),
      { kind: 'validated', batch_id: 'b2' },
      { kind: 'models_changed', scope: 'catalogue' },
    ])
  })
})

test('claimable signals coalesce per model and needs: one with needs never hides another (docs/api.md §7 Poll rule 7)', () => {
  const needing = (batch_id: string, needs?: string[]): BatchSignal => ({
    kind: 'claimable',
    batch_id,
    model: 'm',
    ...(needs && { needs }),
  })
  expect(
    coalesceSignals([
      needing('b1', ['json_mode']),
      needing('b2', []),
      needing('b3', ['json_mode']),
      needing('b4'),
    ]),
  ).toEqual([needing('b3', ['json_mode']), needing('b2', []), needing('b4')])
})

describeWith(postgres, 'postgres signals', () => {
  let db: PgDb
  beforeAll(async () => {
    db = openPostgres({ url: await freshPostgresUrl(), max: 4 })
  })
  afterAll(() => db.$client.close())

  /** Instance b's received signals and the raw NOTIFY payloads on the channel. */
  async function listening() {
    const received: BatchSignal[] = []
    const payloads: string[] = []
    let arrived: (() => void) | undefined
    const rawSub = await db.$client.listen('gridkeep_batches', (p) => payloads.push(p))
    const stop = await postgresSignals(db, 'inst_b').subscribe((s) => {
      received.push(s)
      arrived?.()
    })
    const until = async (done: () => boolean) => {
      while (!done()) await new Promise<void>((resolve) => (arrived = resolve))
    }
    return {
      received,
      payloads,
      until,
      close: async () => {
        await stop()
        await rawSub.unlisten()
      },
    }
  }

  test('one tick of signals arrives in one NOTIFY, coalesced; an instance skips its own', async () => {
    const b = await listening()
    const a = postgresSignals(db, 'inst_a')
    const own = postgresSignals(db, 'inst_b')
    await Promise.all([
      a.publish(claimable('b1', 'm')),
      a.publish({ kind: 'validated', batch_id: 'b1' }),
      a.publish(claimable('b2', 'm')),
      a.publish({ kind: 'validated', batch_id: 'b2' }),
      own.publish({ kind: 'validated', batch_id: 'mine' }),
    ])
    // A later tick: its own NOTIFY, after the first (NOTIFYs arrive in order).
    await a.publish({ kind: 'models_changed', scope: 'fleet' })
    await b.until(() => b.received.some((s) => s.kind === 'models_changed'))
    expect(b.received).toEqual([
      claimable('b2', 'm'),
      { kind: 'validated', batch_id: 'b1' },
      { kind: 'validated', batch_id: 'b2' },
      { kind: 'models_changed', scope: 'fleet' },
    ])
    // a's first tick, b's own (not received), a's second tick.
    expect(b.payloads.length).toBe(3)
    await b.close()
  })

  test('a tick larger than one payload is split, nothing lost', async () => {
    const b = await listening()
    const a = postgresSignals(db, 'inst_a')
    const ids = Array.from({ length: 400 }, (_, i) => `batch_${String(i).padStart(30, '0')}`)
    await Promise.all(ids.map((batch_id) => a.publish({ kind: 'validated', batch_id })))
    await b.until(() => b.received.length === ids.length)
    expect(b.received.map((s) => (s.kind === 'validated' ? s.batch_id : ''))).toEqual(ids)
    expect(b.payloads.length).toBeGreaterThan(1)
    for (const p of b.payloads) expect(p.length).toBeLessThan(8000)
    await b.close()
  })
})
