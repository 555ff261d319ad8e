import type { Database } from 'bun:sqlite'
import { lookup } from 'node:dns/promises'
import { join } from 'node:path'
import type { Config } from './config'
import { migrate } from './db/migrate'
import { type Db, openDb } from './db/open'
import { type BlobStore, createBlobStore } from './lib/blobs'
import { LocalBlobStore } from './lib/blobs/local'
import { type Clock, systemClock } from './lib/clock'
import { type DiskProbe, noDiskProbe, statfsProbe } from './lib/disk'
import { newId } from './lib/ids'
import { createMailer, type Mailer } from './lib/mailer'
import { createMetrics, type Metrics } from './lib/metrics'
import { createPasswords, type Passwords } from './lib/passwords'
import { createTokens, resolveJwtSecret, type Tokens } from './lib/tokens'
import type { Store } from './store'
import { postgresStore } from './store/postgres'
import { openPostgres } from './store/postgres/db'
import { sqliteStore } from './store/sqlite'

/** Resolves a host name to its addresses (webhook URL checks, docs/api.md §13; tests inject one). */
export type ResolveHost = (hostname: string) => Promise<string[]>

/**
 * The infrastructure every layer above the store uses (ARCHITECTURE.md rule 2), passed explicitly: services take `deps` and a
 * principal, never the HTTP context, so the CLI, background loops and tests reuse them.
 */
export interface Deps {
  config: Config
  /**
   * The SQLite engine's handles (absent on PostgreSQL): for that engine and SQLite-only tools and
   * tests. Nothing above the seam reads them (test/store/seam.test.ts).
   */
  db: Db
  sqlite: Database
  /** The storage seam (src/store): the product's state, one engine per database. */
  store: Store
  /** File bytes (docs/api.md §5, §12): local disk or S3, chosen by STORAGE_URL. */
  blobs: BlobStore
  /** Free space where the blobs live (docs/api.md §15 MIN_FREE_DISK_BYTES); none on S3. */
  disk: DiskProbe
  clock: Clock
  mailer: Mailer
  tokens: Tokens
  passwords: Passwords
  metrics: Metrics
  /** Aborted when the server begins to shut down: open streams end and loops stop. */
  shutdown: AbortController
  /** Unix seconds when this process started (sweeper startup grace). */
  startedAt: number
  /**
   * Random, one per server: this process among the instances sharing a database (validation
   * leases, signals, docs/api.md §12); keeps two servers' HTTP plugins apart in one process.
   */
  instanceId: string
  /** Host name → addresses, for webhook URL checks at creation and delivery (docs/api.md §13). */
  resolveHost: ResolveHost
}

export interface DepsOverrides {
  clock?: Clock
  mailer?: Mailer
  passwords?: Passwords
  disk?: DiskProbe
  resolveHost?: ResolveHost
}

/**
 * docs/api.md §12: SQLite at DATABASE_PATH (opened and migrated here), or PostgreSQL at DATABASE_URL
 * (connected lazily; `store.ready()` migrates it before the server listens).
 */
export function openStore(
  config: Config,
  instanceId: string,
  clock: Clock,
): Pick<Deps, 'db' | 'sqlite' | 'store'> {
  if (config.DATABASE_URL) {
    const pg = openPostgres({ url: config.DATABASE_URL, max: config.DATABASE_POOL_SIZE })
    // The SQLite handles do not exist here; nothing behind the seam may reach for them.
    return {
      db: undefined as never,
      sqlite: undefined as never,
      store: postgresStore(pg, config, instanceId, clock),
    }
  }
  const { db, sqlite } = openDb({ path: config.DATABASE_PATH, synchronous: config.SQLITE_SYNCHRONOUS })
  migrate(db)
  return { db, sqlite, store: sqliteStore({ db, sqlite, config, clock }) }
}

/** The system resolver (getaddrinfo: /etc/hosts, then DNS), every address of the name. */
const systemResolveHost: ResolveHost = async (hostname) =>
  (await lookup(hostname, { all: true })).map((a) => a.address)

/** Opens the database and builds the infrastructure; the per-server state is src/compose.ts's. */
export function createDeps(config: Config, overrides: DepsOverrides = {}): Deps {
  const clock = overrides.clock ?? systemClock
  const instanceId = newId('inst_')
  const secret = resolveJwtSecret(config.JWT_SECRET, config.DATA_DIR)
  const blobs = createBlobStore(config)
  return {
    config,
    ...openStore(config, instanceId, clock),
    blobs,
    disk: overrides.disk ?? (blobs instanceof LocalBlobStore ? statfsProbe(blobs.root) : noDiskProbe),
    clock,
    mailer:
      overrides.mailer ??
      createMailer({
        smtpUrl: config.SMTP_URL,
        from: config.MAIL_FROM,
        outboxDir: join(config.DATA_DIR, 'outbox'),
      }),
    tokens: createTokens(secret, config.JWT_TTL_SECONDS, clock),
    passwords: overrides.passwords ?? createPasswords(),
    metrics: createMetrics(),
    shutdown: new AbortController(),
    startedAt: clock.now(),
    instanceId,
    resolveHost: overrides.resolveHost ?? systemResolveHost,
  }
}
