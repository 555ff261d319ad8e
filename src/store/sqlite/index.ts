import type { Database } from 'bun:sqlite'
import type { Config } from '../../config'
import type { Db } from '../../db/open'
import type { Clock } from '../../lib/clock'
import { RateLimiter } from '../../lib/rate-limit'
import type { Store } from '../index'
import { sqliteAccounts } from './accounts'
import { sqliteBatches } from './batches'
import { sqliteCatalogue } from './catalogue'
import { sqliteFiles } from './files'
import { sqliteFleet } from './fleet'
import { sqliteKeys } from './keys'
import { sqliteLimits } from './limits'
import { sqliteOrgs } from './orgs'
import { sqliteQueue } from './queue'
import { sqliteSignals } from './signals'
import { sqliteSso } from './sso'
import { sqliteUsage } from './usage'
import { sqliteWebhooks } from './webhooks'

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
    files: sqliteFiles(deps),
    limits: sqliteLimits(new RateLimiter(deps.clock)),
    signals: sqliteSignals(),
    // Opened and migrated synchronously by src/db/open.ts and src/db/migrate.ts.
    async ready() {},
    async ping() {
      deps.sqlite.query('SELECT 1').get()
    },
    accounts: sqliteAccounts(deps),
    sso: sqliteSso(deps),
    keys: sqliteKeys(deps),
    orgs: sqliteOrgs(deps),
    fleet: sqliteFleet(deps),
    catalogue: sqliteCatalogue(deps),
    usage: sqliteUsage(deps),
    webhooks: sqliteWebhooks(deps),
    async close() {
      deps.sqlite.close()
    },
  }
}
