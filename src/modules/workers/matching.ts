import type { Deps } from '../../deps'

// placeholder: replaced by the workers branch at merge
export function servableCatalogIds(_deps: Deps): Set<string> {
  return new Set()
}
