import type { Config } from '../../config'
import type { Store } from '../index'
import { postgresCatalogue } from './catalogue'
import type { PgDb } from './db'
import { postgresFleet } from './fleet'
import { postgresQueue } from './queue'

/** The PostgreSQL store over an open, migrated database (db.ts). */
export function postgresStore(db: PgDb, config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>): Store {
  return {
    kind: 'postgres',
    queue: postgresQueue(db, config),
    fleet: postgresFleet(db, config),
    catalogue: postgresCatalogue(db),
    async close() {
      await db.$client.close()
    },
  }
}
