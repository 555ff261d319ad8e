import { useEffect, useState } from 'preact/hooks'

// History-API routing: every page has a real URL under /app/ (docs/api.md §11), served by the server.

const listeners = new Set<() => void>()

export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, '', to)
  else history.pushState(null, '', to)
  for (const l of listeners) l()
}

export function useLocation(): URL {
  const [, setTick] = useState(0)
  useEffect(() => {
    const update = () => setTick((n) => n + 1)
    listeners.add(update)
    addEventListener('popstate', update)
    return () => {
      listeners.delete(update)
      removeEventListener('popstate', update)
    }
  }, [])
  return new URL(location.href)
}

/** Plain left clicks on same-origin links stay in the page. */
export function onLinkClick(e: MouseEvent): void {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return
  const a = (e.target as Element).closest('a')
  if (!a || a.target || a.hasAttribute('download') || a.origin !== location.origin) return
  e.preventDefault()
  navigate(a.pathname + a.search)
}
