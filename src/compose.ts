import type { Config } from './config'
import { createDeps, type Deps, type DepsOverrides } from './deps'
import { CredentialCache, type CredentialState } from './http/credential-cache'
import type { RequestCount } from './http/lifecycle'
import { BatchEventBus, type BatchEventsState } from './lib/batch-events'
import { IdentityProvider, type OidcState } from './modules/auth/oidc'
import type { EventStreamsState } from './modules/batches/events'
import { BatchFollowers, type FollowState } from './modules/batches/follow'
import { type CatalogueState, CatalogueView } from './modules/catalogue/view'
import type { PoolState } from './modules/pool/service'
import type { StatsState } from './modules/stats/service'
import { PlacementView } from './modules/workers/placement'
import { type PollState, PollWaiters } from './modules/workers/waiters'
import type { ValidatorState } from './services/validator'
import type { DeliveryState } from './services/webhooks'

// The composition (ARCHITECTURE.md rule 2): the infrastructure (src/deps.ts) and the per-server
// state each layer owns, made here once per server (never in module-level maps, so each server and
// each test's app has its own and it goes when the server does) and handed to whoever declares it.

/** The per-server state, each part declared by the file that owns it. */
export type ServerState = CredentialState &
  RequestCount &
  BatchEventsState &
  EventStreamsState &
  FollowState &
  CatalogueState &
  PollState &
  PoolState &
  StatsState &
  ValidatorState &
  DeliveryState &
  OidcState

/** One server: its infrastructure and its state, the one object the app, the loops and the CLI get. */
export type Server = Deps & ServerState

/** A fresh state for one server. */
export const createServerState = (config: Config): ServerState => ({
  credentials: new CredentialCache(),
  requestsOpen: 0,
  batchEvents: new BatchEventBus(),
  eventStreams: new Map(),
  batchFollowers: new BatchFollowers(),
  catalogueView: new CatalogueView(),
  pollWaiters: new PollWaiters(),
  placement: new PlacementView(),
  poolCache: new Map(),
  queueStatsCache: {},
  validating: new Set(),
  webhooksInFlight: new Set(),
  identityProvider: config.OIDC_ISSUER ? new IdentityProvider(config) : null,
})

/** Opens the database, builds the infrastructure and this server's state. */
export function createServer(config: Config, overrides: DepsOverrides = {}): Server {
  return Object.assign(createDeps(config, overrides), createServerState(config))
}
