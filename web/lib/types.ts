// The API's shapes, taken from the server's own schemas and services (ARCHITECTURE.md rule 16), never
// copied by hand. Type-only imports: nothing of the server reaches the bundle. What a call answers
// comes from its route (`client` in api.ts); these name the shapes components take as props.
import type { Page } from '../../src/lib/pagination'
import type { AuditEventObject } from '../../src/modules/audit/model'
import type { me } from '../../src/modules/auth/service'
import type { BatchObject, ShardObject } from '../../src/modules/batches/model'
import type { FileObject } from '../../src/modules/files/model'
import type { KeyRecord } from '../../src/modules/keys/model'
import type { listMembers, listMyOrgs } from '../../src/modules/orgs/service'
import type { PoolCapacity } from '../../src/modules/pool/service'
import type { QueueStats } from '../../src/modules/stats/service'
import type { UsageBucket, UsageList } from '../../src/modules/usage/model'
import type { UserObject } from '../../src/modules/users/model'
import type { toWorkerRows } from '../../src/modules/workers/listing'

export type {
  BatchObject,
  FileObject,
  KeyRecord,
  PoolCapacity,
  QueueStats,
  ShardObject,
  UsageList,
  UserObject,
}
export type UsageRow = UsageBucket
export type AuditEvent = AuditEventObject
/** GET /v1/batches/{id}/shards (docs/api.md §16): every shard at once, not paged. */
export type Worker = Awaited<ReturnType<typeof toWorkerRows>>[number]
export type Org = Awaited<ReturnType<typeof listMyOrgs>>['data'][number]
export type Member = Awaited<ReturnType<typeof listMembers>>['data'][number]
export type NewKey = KeyRecord & { key: string }

/** Every list of the API (docs/api.md §0). */
export type List<T> = Page<T>
export type Me = Awaited<ReturnType<typeof me>>
