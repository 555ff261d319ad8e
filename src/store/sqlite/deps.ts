import type { Config } from '../../config'
import type { Db } from '../../db/open'

/** What each SQLite store part is made from (ARCHITECTURE.md rule 8): the one connection and the config it reads. */
export interface SqliteDeps {
  db: Db
  config: Pick<Config, 'MAX_BATCH_ATTEMPTS'>
}
