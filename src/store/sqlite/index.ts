import type { Database } from 'bun:sqlite'
import type { Config } from '../../config'
import type { Db } from '../../db/open'
import type { Store } from '../index'
import { sqliteAccounts } from './accounts'
import { sqliteKeys } from './keys'
import { sqliteOrgs } from './orgs'
import { sqliteQueue } from './queue'

/** The SQLite store over an open, migrated database (src/db/open.ts). */
export function sqliteStore(deps: {
  db: Db
  sqlite: Database
  config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>
}): Store {
  return {
    kind: 'sqlite',
    queue: sqliteQueue(deps),
    accounts: sqliteAccounts(deps),
    keys: sqliteKeys(deps),
    orgs: sqliteOrgs(deps),
    async close() {
      deps.sqlite.close()
    },
  }
}
