import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import type { List } from './types'

export interface Resource<T> {
  data: T | undefined
  error: unknown
  loading: boolean
  reload: () => void
}

/**
 * Loads `load()` when `key` changes, and again every `refreshMs` if given. A failed refresh keeps
 * the last data and reports the error; nothing spins forever (a failure ends `loading`).
 */
export function useResource<T>(
  load: (signal: AbortSignal) => Promise<T>,
  key: string,
  refreshMs = 0,
): Resource<T> {
  const [data, setData] = useState<T>()
  const [error, setError] = useState<unknown>()
  const [loading, setLoading] = useState(true)
  const [tick, setTick] = useState(0)
  const loadRef = useRef(load)
  loadRef.current = load
  // A new key starts empty; a reload or refresh of the same key keeps what is shown.
  const shownKey = useRef(key)
  useEffect(() => {
    if (shownKey.current !== key) {
      shownKey.current = key
      setData(undefined)
    }
    const abort = new AbortController()
    setLoading(true)
    loadRef.current(abort.signal).then(
      (d) => {
        if (abort.signal.aborted) return
        setData(d)
        setError(undefined)
        setLoading(false)
      },
      (e) => {
        if (abort.signal.aborted) return
        setError(e)
        setLoading(false)
      },
    )
    return () => abort.abort()
  }, [key, tick])
  useEffect(() => {
    if (!refreshMs) return
    const timer = setInterval(() => setTick((n) => n + 1), refreshMs)
    return () => clearInterval(timer)
  }, [refreshMs])
  const reload = useCallback(() => setTick((n) => n + 1), [])
  return { data, error, loading, reload }
}

export interface Paged<T> extends Resource<List<T>> {
  page: number
  next: (() => void) | null
  previous: (() => void) | null
}

/** The query of one page: `limit`, and the cursor `after` past the first page. */
export interface PageQuery {
  limit: string
  after?: string
}

/**
 * One page of an API list (docs/api.md §0 cursors), with next/previous; one request per page.
 * `load` asks the typed client for the page (`(page, signal) => ok(client.v1.files.get(…))`);
 * `key` names the list, so a new filter starts again at its first page.
 */
export function usePaged<T>(
  load: (page: PageQuery, signal: AbortSignal) => Promise<List<T>>,
  key: string,
  refreshMs = 0,
  limit = 20,
): Paged<T> {
  const [cursors, setCursors] = useState<{ key: string; stack: (string | undefined)[] }>({
    key,
    stack: [undefined],
  })
  // Another list (new filter): back to its first page.
  const stack = cursors.key === key ? cursors.stack : [undefined]
  const after = stack[stack.length - 1]
  const res = useResource(
    (signal) => load(after ? { limit: String(limit), after } : { limit: String(limit) }, signal),
    `${key}?limit=${limit}&after=${after ?? ''}`,
    refreshMs,
  )
  const last = res.data?.last_id
  return {
    ...res,
    page: stack.length,
    next: res.data?.has_more && last ? () => setCursors({ key, stack: [...stack, last] }) : null,
    previous: stack.length > 1 ? () => setCursors({ key, stack: stack.slice(0, -1) }) : null,
  }
}
