import { expect, test } from 'bun:test'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'

// ARCHITECTURE.md rule 18: decide above, apply below; an import that goes up a layer is a bug. The
// layers, lowest first. A `checked` layer imports nothing from a layer after it; a `closed` one
// imports only from itself and the layers before it (no packages either), and from `typesOnly`
// only with `import type`, which leaves nothing behind at run time.
const LAYERS = [
  { dirs: ['src/lib', 'src/db/schema'] },
  { dirs: ['src/domain'], checked: true, closed: true, typesOnly: ['src/db/schema'] },
  { dirs: ['src/store'], checked: true },
  { dirs: ['src/modules', 'src/services', 'src/http', 'src/deps.ts', 'src/app.ts', 'src/index.ts'] },
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

/** What is wrong with the imports of `file` (repository-relative) whose source is `text`. */
function violations(file: string, text: string): string[] {
  const at = layerOf(file)
  const layer = LAYERS[at]
  if (!layer?.checked) return []
  const out: string[] = []
  for (const { spec, typeOnly } of importsOf(text)) {
    const target = spec.startsWith('.') ? normalize(join(dirname(file), spec)) : null
    const to = target === null ? -1 : layerOf(target)
    const where = `${file} imports '${spec}'`
    if (to > at) out.push(`${where}: a layer above ${layer.dirs.join(', ')}`)
    else if (layer.closed && to === -1)
      out.push(`${where}: outside ${layer.dirs.join(', ')} and the layers below`)
    else if (!typeOnly && target !== null && layer.typesOnly?.some((d) => within(target, d)))
      out.push(`${where}: only \`import type\` may reach it`)
  }
  return out
}

test('src/store and src/domain import nothing from above; src/domain nothing beyond lib and schema types', () => {
  const found: string[] = []
  for (const layer of LAYERS.filter((l) => l.checked))
    for (const dir of layer.dirs)
      for (const file of sources(dir)) found.push(...violations(file, readFileSync(join(ROOT, file), 'utf8')))
  expect(found).toEqual([])
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
  for (const [file, text] of [
    ['src/store/sqlite/x.ts', "import {\n  type A,\n  b,\n} from '../../modules/batches/a'"],
    ['src/store/x.ts', "import type { A } from '../modules/a'"],
    ['src/store/x.ts', "export { a } from '../services/a'"],
    ['src/store/x.ts', "const a = await import('../http/a')"],
    ['src/domain/x.ts', "import type { A } from '../store/a'"],
    ['src/domain/x.ts', "import { Type } from '@sinclair/typebox'"],
    ['src/domain/x.ts', "import { batches } from '../db/schema'"],
    ['src/domain/x.ts', "import { tx } from '../db/tx'"],
  ])
    expect(violations(file!, text!)).toHaveLength(1)
})
