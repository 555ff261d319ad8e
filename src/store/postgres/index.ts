import type { Config } from '../../config'
import type { Clock } from '../../lib/clock'
import type { Store } from '../index'
import { postgresAccounts } from './accounts'
import { postgresBatches } from './batches'
import { postgresCatalogue } from './catalogue'
import { closePostgres, migratePostgres, type PgDb } from './db'
import { postgresFiles } from './files'
import { postgresFleet } from './fleet'
import { postgresKeys } from './keys'
import { postgresLimits } from './limits'
import { postgresOrgs } from './orgs'
import { postgresQueue } from './queue'
import { postgresSignals } from './signals'
import { postgresSso } from './sso'
import { postgresUsage } from './usage'
import { postgresWebhooks } from './webhooks'

/** The PostgreSQL store over an open, migrated database (db.ts). */
export function postgresStore(
  db: PgDb,
  config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>,
  instanceId: string,
  clock: Clock,
): Store {
  const signals = postgresSignals(db, instanceId)
  return {
    kind: 'postgres',
    queue: postgresQueue(db, config),
    batches: postgresBatches(db),
    files: postgresFiles(db),
    limits: postgresLimits(db, clock),
    signals,
    ready: () => migratePostgres(db),
    async ping() {
      await db.$client`SELECT 1`
    },
    accounts: postgresAccounts(db),
    sso: postgresSso(db),
    keys: postgresKeys(db),
    orgs: postgresOrgs(db),
    fleet: postgresFleet(db, config),
    catalogue: postgresCatalogue(db),
    usage: postgresUsage(db),
    webhooks: postgresWebhooks(db),
    close: () => closePostgres(db),
  }
}
