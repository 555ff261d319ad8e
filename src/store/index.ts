import type { AccountsStore } from './accounts'
import type { KeysStore } from './keys'
import type { OrgsStore } from './orgs'
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
  /** Users, password changes and reset tokens (accounts.ts). */
  readonly accounts: AccountsStore
  /** Personal and worker API keys, and the credential lookup of every keyed request (keys.ts). */
  readonly keys: KeysStore
  /** Organizations, memberships and the last-owner rule's transactions (orgs.ts). */
  readonly orgs: OrgsStore
  close(): Promise<void>
}
