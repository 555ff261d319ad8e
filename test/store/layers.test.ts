import { expect, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'

// ARCHITECTURE.md rule 18: decide above, apply below; an import that goes up a layer, or that
// closes a cycle of files, is a bug. The layers of src/, lowest first, written once: a file
// imports only from its own layer and the layers before it (`reaches`, when given, narrows that
// to a list), never from a layer after it. A `closed` layer imports no package either, and reaches
// `typesOnly` only with `import type`, which leaves nothing behind at run time.
//
// The daemon is its own root: the server never imports it (only the entry, src/cli.ts, starts
// it), and it reaches only src/lib, the pure rules and the worker protocol's schemas. The terminal
// client (src/client) is another, reaching the same and started the same way. The dashboard (web/)
// is another root with its own tsconfig and bundle, outside src/ and this test.
interface Layer {
  dirs: string[]
  reaches?: string[]
  closed?: boolean
  typesOnly?: string[]
}
const LAYERS: Layer[] = [
  /** Helpers, configuration and the database's schema and handles. */
  { dirs: ['src/lib', 'src/db', 'src/config.ts', 'src/types.d.ts'] },
  /** The pure rules and the types they speak. */
  { dirs: ['src/domain'], reaches: ['src/lib', 'src/db/schema'], closed: true, typesOnly: ['src/db/schema'] },
  /** The wire protocol's schemas, shared by the routes, the daemon and its tests' fake. */
  { dirs: ['src/protocol'], reaches: ['src/lib', 'src/domain'] },
  /** The storage seam and its two engines. */
  { dirs: ['src/store'] },
  /** The infrastructure every layer above takes (Deps). */
  { dirs: ['src/deps.ts'] },
  /** The request lifecycle, the credential matrix and who is calling. */
  { dirs: ['src/http'] },
  /** The features: routes and services, and the background loops. */
  { dirs: ['src/modules', 'src/services'] },
  /** The worker daemon: its own root. */
  { dirs: ['src/daemon'], reaches: ['src/lib', 'src/domain', 'src/protocol'] },
  /** The terminal client (`gridkeep login`, `submit` …): its own root, a client of the public API. */
  { dirs: ['src/client'], reaches: ['src/lib', 'src/domain', 'src/protocol'] },
  /** The composition (per-server state), the app, the entry points and the operators' tools. */
  { dirs: ['src/compose.ts', 'src/app.ts', 'src/index.ts', 'src/cli.ts', 'src/ops'] },
]

const ROOT = join(import.meta.dir, '../..')

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(join(ROOT, dir))) {
    const path = `${dir}/${name}`
    if (statSync(join(ROOT, path)).isDirectory()) yield* sources(path)
    else if (/\.tsx?$/.test(name)) yield path
  }
}

const within = (path: string, dir: string) =>
  path === dir || path.startsWith(`${dir}/`) || path === dir.replace(/\.ts$/, '')

/** The index of the layer `path` (repository-relative, no extension needed) belongs to, or -1. */
const layerOf = (path: string) => LAYERS.findIndex((l) => l.dirs.some((d) => within(path, d)))

interface Import {
  spec: string
  typeOnly: boolean
}

/** Every module specifier in `text`: static imports and re-exports (with `import type`), side-effect and dynamic imports. */
function importsOf(text: string): Import[] {
  const out: Import[] = []
  for (const m of text.matchAll(/^\s*(?:import|export)\s+(type\s+)?[\w$*\s{},]*?\bfrom\s*['"]([^'"]+)['"]/gm))
    out.push({ spec: m[2]!, typeOnly: Boolean(m[1]) })
  for (const m of text.matchAll(/^\s*import\s*['"]([^'"]+)['"]/gm)) out.push({ spec: m[1]!, typeOnly: false })
  for (const m of text.matchAll(/\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g))
    out.push({ spec: m[1]!, typeOnly: false })
  return out
}

/** The repository-relative path a relative specifier of `file` names (no extension), or null for a package. */
const targetOf = (file: string, spec: string) =>
  spec.startsWith('.') ? normalize(join(dirname(file), spec)) : null

/** What is wrong with the imports of `file` (repository-relative) whose source is `text`. */
function violations(file: string, text: string): string[] {
  const at = layerOf(file)
  const layer = LAYERS[at]
  if (!layer) return [`${file}: in no layer (test/store/layers.test.ts)`]
  const out: string[] = []
  for (const { spec, typeOnly } of importsOf(text)) {
    const target = targetOf(file, spec)
    const to = target === null ? -1 : layerOf(target)
    const where = `${file} imports '${spec}'`
    if (to > at) out.push(`${where}: a layer above ${layer.dirs.join(', ')}`)
    else if (to !== -1 && to !== at && layer.reaches && !layer.reaches.some((d) => within(target!, d)))
      out.push(`${where}: ${layer.dirs.join(', ')} reaches only ${layer.reaches.join(', ')}`)
    else if (layer.closed && to === -1)
      out.push(`${where}: outside ${layer.dirs.join(', ')} and the layers below`)
    else if (!typeOnly && target !== null && layer.typesOnly?.some((d) => within(target, d)))
      out.push(`${where}: only \`import type\` may reach it`)
  }
  return out
}

const SOURCE = /\.(tsx?|d\.ts)$/
/** The file a relative specifier names, among `files`, or null (a package, JSON, SQL). */
function resolveIn(files: Set<string>, target: string): string | null {
  for (const c of [target, `${target}.ts`, `${target}.tsx`, `${target}/index.ts`])
    if (files.has(c) && SOURCE.test(c)) return c
  return null
}

/** The import graph of `texts` (path → source), type imports included. */
function graphOf(texts: Map<string, string>): Map<string, string[]> {
  const files = new Set(texts.keys())
  const graph = new Map<string, string[]>()
  for (const [file, text] of texts) {
    const to: string[] = []
    for (const { spec } of importsOf(text)) {
      const target = targetOf(file, spec)
      const found = target === null ? null : resolveIn(files, target)
      if (found) to.push(found)
    }
    graph.set(file, to)
  }
  return graph
}

/** Every cycle a depth-first search meets, each named by its files in import order (first repeated last). */
function cycles(graph: Map<string, string[]>): string[] {
  const found: string[] = []
  const done = new Set<string>()
  const path: string[] = []
  const onPath = new Set<string>()
  const visit = (file: string) => {
    path.push(file)
    onPath.add(file)
    for (const next of graph.get(file) ?? []) {
      if (onPath.has(next)) found.push([...path.slice(path.indexOf(next)), next].join(' → '))
      else if (!done.has(next)) visit(next)
    }
    path.pop()
    onPath.delete(file)
    done.add(file)
  }
  for (const file of [...graph.keys()].sort()) if (!done.has(file)) visit(file)
  return found
}

const everySource = () => new Map([...sources('src')].map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]))

test('every file of src/ is in a layer and imports nothing from a layer above it, or beyond what its layer reaches', () => {
  const found: string[] = []
  for (const [file, text] of everySource()) found.push(...violations(file, text))
  expect(found).toEqual([])
  expect(existsSync(join(ROOT, 'src/protocol/worker.ts'))).toBe(true)
})

test('no cycle of imports in src/, type imports included', () => {
  expect(cycles(graphOf(everySource()))).toEqual([])
})

test('the check sees an import that goes up, leaves its layer, or reaches the schema at run time', () => {
  const ok = "import type { BatchRow } from '../db/schema'\nimport { badRequest } from '../lib/errors'\n"
  expect(violations('src/domain/x.ts', ok)).toEqual([])
  expect(
    violations(
      'src/store/sqlite/x.ts',
      "import { eq } from 'drizzle-orm'\nimport { a } from '../../domain/a'",
    ),
  ).toEqual([])
  expect(
    violations('src/modules/x/a.ts', "import { b } from '../../http/b'\nimport type { D } from '../../deps'"),
  ).toEqual([])
  expect(violations('src/cli.ts', "import { run } from './daemon/cli'")).toEqual([])
  expect(violations('src/cli.ts', "import { runClientCommand } from './client/cli'")).toEqual([])
  expect(violations('src/client/a.ts', "import type { ShardTally } from '../domain/shards'")).toEqual([])
  for (const [file, text] of [
    ['src/store/sqlite/x.ts', "import {\n  type A,\n  b,\n} from '../../modules/batches/a'"],
    ['src/store/x.ts', "import type { A } from '../modules/a'"],
    ['src/store/x.ts', "export { a } from '../services/a'"],
    ['src/store/x.ts', "const a = await import('../http/a')"],
    ['src/store/x.ts', "import type { Deps } from '../deps'"],
    ['src/domain/x.ts', "import type { A } from '../store/a'"],
    ['src/domain/x.ts', "import { Type } from '@sinclair/typebox'"],
    ['src/domain/x.ts', "import { batches } from '../db/schema'"],
    ['src/domain/x.ts', "import { tx } from '../db/tx'"],
    ['src/http/x.ts', "import { a } from '../modules/auth/a'"],
    ['src/modules/x/a.ts', "import type { Server } from '../../compose'"],
    ['src/services/a.ts', "import { run } from '../daemon/agent'"],
    ['src/daemon/a.ts', "import type { Store } from '../store'"],
    ['src/client/a.ts', "import type { BatchObject } from '../modules/batches/model'"],
    ['src/client/a.ts', "import { Agent } from '../daemon/agent'"],
    ['src/modules/x/a.ts', "import { Api } from '../../client/api'"],
    ['src/lib/a.ts', "import type { Deps } from '../deps'"],
  ])
    expect(violations(file!, text!)).toHaveLength(1)
  expect(violations('src/elsewhere/a.ts', '')).toHaveLength(1)
})

test('the cycle check names the files of a cycle, type imports included', () => {
  const texts = new Map([
    ['src/modules/a/x.ts', "import type { Y } from './y'"],
    ['src/modules/a/y.ts', "import { z } from '../b'"],
    ['src/modules/b/index.ts', "import { x } from '../a/x'\nimport { w } from './w'"],
    ['src/modules/b/w.ts', "import { eq } from 'drizzle-orm'"],
  ])
  expect(cycles(graphOf(texts))).toEqual([
    'src/modules/a/x.ts → src/modules/a/y.ts → src/modules/b/index.ts → src/modules/a/x.ts',
  ])
  texts.set('src/modules/b/index.ts', "import { w } from './w'")
  expect(cycles(graphOf(texts))).toEqual([])
})
