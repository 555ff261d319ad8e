// A worker's inventory (docs/api.md §7 "hosts"): one model as the fleet store reads it back and the
// matching predicate (src/domain/matching.ts) judges it.

export interface HostedModel {
  name: string
  runtime: string | null
  digest: string | null
  loaded: boolean
  advertised: boolean
  configured: boolean
  on_disk: boolean
}
