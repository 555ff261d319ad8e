import type { Config } from '../../config'
import type { Store } from '../index'
import { postgresBatches } from './batches'
import type { PgDb } from './db'
import { postgresQueue } from './queue'
import { postgresSignals } from './signals'

/** The PostgreSQL store over an open, migrated database (db.ts). */
export function postgresStore(
  db: PgDb,
  config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>,
  instanceId: string,
): Store {
  return {
    kind: 'postgres',
    queue: postgresQueue(db, config),
    batches: postgresBatches(db),
    signals: postgresSignals(db, instanceId),
    async close() {
      await db.$client.close()
    },
  }
}
