import type { Database } from 'bun:sqlite'
import type { Config } from '../../config'
import type { Db } from '../../db/open'
import type { Clock } from '../../lib/clock'
import type { Store } from '../index'
import { sqliteBatches } from './batches'
import { sqliteLimits } from './limits'
import { sqliteQueue } from './queue'
import { sqliteSignals } from './signals'

/** The SQLite store over an open, migrated database (src/db/open.ts). */
export function sqliteStore(deps: {
  db: Db
  sqlite: Database
  config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>
  clock: Clock
}): Store {
  return {
    kind: 'sqlite',
    queue: sqliteQueue(deps),
    batches: sqliteBatches(deps),
    limits: sqliteLimits(deps.clock),
    signals: sqliteSignals(),
    // Opened and migrated synchronously by src/db/open.ts and src/db/migrate.ts.
    async ready() {},
    async ping() {
      deps.sqlite.query('SELECT 1').get()
    },
    async close() {
      deps.sqlite.close()
    },
  }
}
