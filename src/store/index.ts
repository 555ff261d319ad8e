import type { CatalogueStore } from './catalogue'
import type { FleetStore } from './fleet'
import type { QueueStore } from './queue'

// The storage seam (API.md §12; STYLE example 13): every read and write of the product's state
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
  /** Workers, their reports and pull asks, what matching reads, pool and gauge counts (fleet.ts). */
  readonly fleet: FleetStore
  /** The model catalogue: seeding, matching's read, what a user may select (catalogue.ts). */
  readonly catalogue: CatalogueStore
  close(): Promise<void>
}
