import type { Config } from '../../config'
import type { Store } from '../index'
import { postgresBatches } from './batches'
import type { PgDb } from './db'
import { postgresQueue } from './queue'

/** The PostgreSQL store over an open, migrated database (db.ts). */
export function postgresStore(db: PgDb, config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>): Store {
  return {
    kind: 'postgres',
    queue: postgresQueue(db, config),
    batches: postgresBatches(db),
    async close() {
      await db.$client.close()
    },
  }
}
