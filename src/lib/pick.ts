/**
 * The named fields of `from`, under their own names, in the order named: an allow-list, so a field
 * not named (a webhook's secret, a user's password hash) never comes along.
 */
export function pick<T, const K extends keyof T>(from: T, names: readonly K[]): Pick<T, K> {
  return Object.fromEntries(names.map((name) => [name, from[name]])) as Pick<T, K>
}
