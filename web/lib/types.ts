// The API's shapes, taken from the server's own schemas and services (STYLE example 16), never
// copied by hand. Type-only imports: nothing of the server reaches the bundle.
import type { BatchObject } from '../../src/modules/batches/model'
import type { ModelObject } from '../../src/modules/catalogue/model'
import type { FileObject } from '../../src/modules/files/model'
import type { KeyRecord } from '../../src/modules/keys/model'
import type { listMembers, listMyOrgs } from '../../src/modules/orgs/service'
import type { PoolCapacity } from '../../src/modules/pool/service'
import type { QueueStats } from '../../src/modules/stats/service'
import type { UserObject } from '../../src/modules/users/model'
import type { toWorkerRows } from '../../src/modules/workers/listing'

export type { BatchObject, FileObject, KeyRecord, ModelObject, PoolCapacity, QueueStats, UserObject }
export type Worker = ReturnType<typeof toWorkerRows>[number]
export type Org = ReturnType<typeof listMyOrgs>['data'][number]
export type Member = ReturnType<typeof listMembers>['data'][number]
export type NewKey = KeyRecord & { key: string }

export interface List<T> {
  object: 'list'
  data: T[]
  first_id?: string | null
  last_id?: string | null
  has_more?: boolean
}

export interface Me extends UserObject {
  memberships: { org_id: string; org_name: string; role: string; personal: boolean }[]
}

export interface LoginAnswer {
  access_token: string
  must_change_password: boolean
  platform_role: string
}
