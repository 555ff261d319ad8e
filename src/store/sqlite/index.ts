import type { Database } from 'bun:sqlite'
import type { Config } from '../../config'
import type { Db } from '../../db/open'
import type { Store } from '../index'
import { sqliteCatalogue } from './catalogue'
import { sqliteFleet } from './fleet'
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
    fleet: sqliteFleet(deps),
    catalogue: sqliteCatalogue(deps),
    async close() {
      deps.sqlite.close()
    },
  }
}
