import { expect, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'

// A reader of the code can follow every reference it makes: a comment (or test name) in src/,
// test/, bench/, web/ or scripts/ cites only documents in this repository — the contract as
// docs/api.md §N (with its Poll, Pool and catalogue rules), the code's rules as ARCHITECTURE.md
// rule N — and never the files that used to live outside it (API.md, SPEC.md, STYLE.md).

const ROOT = join(import.meta.dir, '../..')
const DIRS = ['src', 'test', 'bench', 'web', 'scripts']
const SELF = relative(ROOT, import.meta.path)
/** References to other projects' documents, not to ours. */
const EXTERNAL = ['ggml docs/gguf.md']

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name.startsWith('.')) continue
    const path = join(dir, name)
    if (statSync(path).isDirectory()) yield* sources(path)
    else if (/\.(ts|tsx|js|cjs|mjs|css|html|sh|ya?ml)$/.test(name)) yield path
  }
}

const api = readFileSync(join(ROOT, 'docs/api.md'), 'utf8')
const sections = new Set([...api.matchAll(/^## §(\d+) /gm)].map((m) => Number(m[1])))

/** How many numbered rules follow `marker` in `text`. */
function ruleCount(text: string, marker: string): number {
  const at = text.indexOf(marker)
  if (at < 0) return 0
  let n = 0
  for (const line of text
    .slice(at + marker.length)
    .split('\n')
    .slice(1)) {
    const item = /^(\d+)\. /.exec(line)
    if (item) n = Number(item[1])
    else if (line.trim() === '' && n > 0) break
    else if (!/^\s/.test(line) && n > 0) break
  }
  return n
}

const rules: Record<string, number> = {
  Poll: ruleCount(api, '**Poll rules**'),
  Pool: ruleCount(api, '**Pool rules.**'),
  catalogue: ruleCount(api, '**Catalogue rules.**'),
}
const architectureRules = ruleCount(
  readFileSync(join(ROOT, 'ARCHITECTURE.md'), 'utf8'),
  '## Rules the code follows',
)

const numbers = (s: string) =>
  s
    .split(/,|and|–|-/)
    .map((x) => Number(x.trim()))
    .filter((x) => Number.isInteger(x) && x > 0)

function problemsIn(text: string): string[] {
  const out: string[] = []
  for (const m of text.matchAll(/\b(API\.md|SPEC(?:\.md)?|STYLE(?:\.md)?)\b/g))
    out.push(`cites ${m[1]}, which is not in the repository`)
  for (const m of text.matchAll(/docs\/api\.md §(\d+)(?:(?:–| and §)(\d+))?/g))
    for (const n of [m[1], m[2]].filter(Boolean).map(Number))
      if (!sections.has(n)) out.push(`cites docs/api.md §${n}, which does not exist`)
  for (const m of text.matchAll(
    /docs\/api\.md §\d+ (Poll|Pool|catalogue) rules? ([0-9][0-9, –-]*(?:and [0-9]+)?)/g,
  ))
    for (const n of numbers(m[2]!))
      if (n > rules[m[1]!]!) out.push(`cites ${m[1]} rule ${n}; docs/api.md has ${rules[m[1]!]}`)
  for (const m of text.matchAll(/ARCHITECTURE\.md rules? ([0-9][0-9, –-]*(?:and [0-9]+)?)/g))
    for (const n of numbers(m[1]!))
      if (n > architectureRules) out.push(`cites ARCHITECTURE.md rule ${n}; it has ${architectureRules}`)
  for (const m of text.matchAll(
    /(?:\.\.\/)*\b((?:docs|bench)\/[\w./-]+\.md|README\.md|ARCHITECTURE\.md)\b/g,
  )) {
    const before = text.slice(Math.max(0, m.index! - 10), m.index! + m[0].length)
    if (EXTERNAL.some((e) => before.endsWith(e))) continue
    if (!existsSync(join(ROOT, m[1]!))) out.push(`cites ${m[1]}, which is not in the repository`)
  }
  return out
}

test('every document a source comment cites is in the repository, down to its section and rule', () => {
  expect(sections.size).toBe(18) // §0–§17
  expect(rules).toEqual({ Poll: 7, Pool: 6, catalogue: 10 })
  expect(architectureRules).toBe(21)
  const found: string[] = []
  for (const dir of DIRS)
    for (const path of sources(join(ROOT, dir))) {
      const file = relative(ROOT, path)
      if (file === SELF) continue
      for (const [i, line] of readFileSync(path, 'utf8').split('\n').entries())
        for (const p of problemsIn(line)) found.push(`${file}:${i + 1}: ${p}`)
    }
  expect(found).toEqual([])
})

test('the check itself finds each kind of broken citation', () => {
  expect(problemsIn('// API.md §7 and SPEC §4 Poll rule 4 (STYLE example 13)')).toHaveLength(3)
  expect(problemsIn('// docs/api.md §18, docs/api.md §7 Poll rule 8, ARCHITECTURE.md rule 22')).toHaveLength(
    3,
  )
  expect(problemsIn('// docs/nowhere.md')).toHaveLength(1)
  expect(
    problemsIn('// docs/api.md §7 Poll rules 1–6; docs/api.md §4 catalogue rule 10; ggml docs/gguf.md'),
  ).toEqual([])
})
