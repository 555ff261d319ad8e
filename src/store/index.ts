import type { AccountsStore } from './accounts'
import type { BatchesStore } from './batches'
import type { CatalogueStore } from './catalogue'
import type { FilesStore } from './files'
import type { FleetStore } from './fleet'
import type { KeysStore } from './keys'
import type { LimitsStore } from './limits'
import type { OrgsStore } from './orgs'
import type { QueueStore } from './queue'
import type { SignalsStore } from './signals'
import type { SsoStore } from './sso'
import type { UsageStore } from './usage'
import type { WebhooksStore } from './webhooks'

// The storage seam (docs/api.md §12; ARCHITECTURE.md rule 13): every read and write of the product's state
// goes through a Store, whose parts are named after the work. One engine per database:
//
//   sqlite/    the default: one process, synchronous BEGIN IMMEDIATE bodies on bun:sqlite
//   postgres/  any number of instances sharing one PostgreSQL database (Bun's SQL client)
//
// The rules — the matching predicate, the state table, the requeue, holder and claim-order rules,
// the credential matrix — live above the seam, once; an engine carries decisions out atomically.

export interface Store {
  readonly kind: 'sqlite' | 'postgres'
  /** Claims, failures, the sweeper, maintenance across instances (queue.ts). */
  readonly queue: QueueStore
  /** Batches, their validation and stored errors (batches.ts). */
  readonly batches: BatchesStore
  /** File records; their bytes are in the blob store (files.ts). */
  readonly files: FilesStore
  /** Rate-limit counters (limits.ts). */
  readonly limits: LimitsStore
  /** Hints between instances sharing the database (signals.ts). */
  readonly signals: SignalsStore
  /** Connects and brings the schema up to date (PostgreSQL: under an advisory lock). */
  ready(): Promise<void>
  /** Readiness: throws when the database does not answer. */
  ping(): Promise<void>
  /** Users, password changes and reset tokens (accounts.ts). */
  readonly accounts: AccountsStore
  /** Single sign-on: sign-ins under way and linked provider identities (sso.ts). */
  readonly sso: SsoStore
  /** Personal and worker API keys, and the credential lookup of every keyed request (keys.ts). */
  readonly keys: KeysStore
  /** Organizations, memberships and the last-owner rule's transactions (orgs.ts). */
  readonly orgs: OrgsStore
  /** Workers, their reports and pull asks, what matching reads, pool and gauge counts (fleet.ts). */
  readonly fleet: FleetStore
  /** The model catalogue: seeding, matching's read, what a user may select (catalogue.ts). */
  readonly catalogue: CatalogueStore
  /** Tokens and requests of completed batches per day, model, key or user (usage.ts). */
  readonly usage: UsageStore
  /** Webhooks, their outbox and delivery attempts (webhooks.ts, docs/api.md §13). */
  readonly webhooks: WebhooksStore
  close(): Promise<void>
}
