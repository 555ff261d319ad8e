import type { Database } from 'bun:sqlite'
import { join } from 'node:path'
import type { Config } from './config'
import { migrate } from './db/migrate'
import { type Db, openDb } from './db/open'
import { BatchEventBus } from './lib/batch-events'
import { type Clock, systemClock } from './lib/clock'
import { createMailer, type Mailer } from './lib/mailer'
import { createMetrics, type Metrics } from './lib/metrics'
import { createPasswords, type Passwords } from './lib/passwords'
import { RateLimiter } from './lib/rate-limit'
import { createTokens, resolveJwtSecret, type Tokens } from './lib/tokens'
import { PollWaiters } from './modules/workers/poll-wait'

/**
 * Everything a service needs, passed explicitly (STYLE example 2): services take `deps` and a
 * principal, never the HTTP context, so the CLI, background loops and tests reuse them.
 */
export interface Deps {
  config: Config
  db: Db
  sqlite: Database
  clock: Clock
  mailer: Mailer
  tokens: Tokens
  passwords: Passwords
  limiter: RateLimiter
  metrics: Metrics
  /** Validator → batch event streams, and the "batch created" signal that wakes the validator. */
  batchEvents: BatchEventBus
  /** Polls held by `wait_seconds`, woken when a batch becomes validated (API.md §7). */
  pollWaiters: PollWaiters
  /** Aborted when the server begins to shut down: open streams end and loops stop. */
  shutdown: AbortController
  /** Unix seconds when this process started (sweeper startup grace). */
  startedAt: number
}

export interface DepsOverrides {
  clock?: Clock
  mailer?: Mailer
  passwords?: Passwords
}

/** Opens and migrates the database and builds the services' dependencies. */
export function createDeps(config: Config, overrides: DepsOverrides = {}): Deps {
  const clock = overrides.clock ?? systemClock
  const { db, sqlite } = openDb({ path: config.DATABASE_PATH, synchronous: config.SQLITE_SYNCHRONOUS })
  migrate(db)
  const secret = resolveJwtSecret(config.JWT_SECRET, config.DATA_DIR)
  return {
    config,
    db,
    sqlite,
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
    limiter: new RateLimiter(clock),
    metrics: createMetrics(),
    batchEvents: new BatchEventBus(),
    pollWaiters: new PollWaiters(),
    shutdown: new AbortController(),
    startedAt: clock.now(),
  }
}
