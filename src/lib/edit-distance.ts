// The Levenshtein distance: insertions, deletions and substitutions turning `a` into `b`. Used to
// name the closest known setting to a mistyped one (src/domain/serving-params.ts).

export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++)
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    prev = row
  }
  return prev[b.length]!
}

/** The candidate nearest to `word`, when it is near enough to be a typo of it (a third of its length, at least 2). */
export function closest(word: string, candidates: Iterable<string>): string | null {
  let best: string | null = null
  let bestDistance = Math.max(2, Math.floor(word.length / 3)) + 1
  for (const c of candidates) {
    const d = editDistance(word, c)
    if (d < bestDistance) {
      best = c
      bestDistance = d
    }
  }
  return best
}
