import type { Config } from '../../config'
import type { Store } from '../index'
import { postgresAccounts } from './accounts'
import type { PgDb } from './db'
import { postgresKeys } from './keys'
import { postgresOrgs } from './orgs'
import { postgresQueue } from './queue'

/** The PostgreSQL store over an open, migrated database (db.ts). */
export function postgresStore(db: PgDb, config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>): Store {
  return {
    kind: 'postgres',
    queue: postgresQueue(db, config),
    accounts: postgresAccounts(db),
    keys: postgresKeys(db),
    orgs: postgresOrgs(db),
    async close() {
      await db.$client.close()
    },
  }
}
