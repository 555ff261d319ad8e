/**
 * Group commit: `write` takes the items that arrived while the previous call ran (or in the same
 * event-loop turn), together, so many small writes under load share one transaction and an idle
 * server writes each at once. One call runs at a time. When a group fails, each of its items is
 * written alone, so a bad item fails only its own caller.
 */
export function grouped<T, R>(write: (items: T[]) => Promise<R[]>, most: number): (item: T) => Promise<R> {
  type Waiting = { item: T; resolve: (r: R) => void; reject: (e: unknown) => void }
  let waiting: Waiting[] = []
  let scheduled = false
  const one = (w: Waiting) => write([w.item]).then(([r]) => w.resolve(r as R), w.reject)
  const flush = async () => {
    while (waiting.length > 0) {
      const group = waiting.slice(0, most)
      waiting = waiting.slice(most)
      if (group.length === 1) {
        await one(group[0]!)
        continue
      }
      try {
        const results = await write(group.map((w) => w.item))
        for (const [i, w] of group.entries()) w.resolve(results[i] as R)
      } catch {
        for (const w of group) await one(w)
      }
    }
    scheduled = false
  }
  return (item) =>
    new Promise<R>((resolve, reject) => {
      waiting.push({ item, resolve, reject })
      if (scheduled) return
      scheduled = true
      setImmediate(() => void flush())
    })
}
