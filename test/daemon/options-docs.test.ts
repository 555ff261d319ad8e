import { expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { CONFIG_ENV, DaemonOptionsSchema, ENV_NAMES } from '../../src/daemon/options'

// docs/worker.md's options table names every option of `gridkeep worker` with its environment
// variable: an option added to src/daemon/options.ts and not documented fails here.

const doc = readFileSync(join(import.meta.dir, '../../docs/worker.md'), 'utf8')
const rows = doc.split('\n').filter((l) => l.startsWith('| `--'))

test('every daemon option and its environment variable has a row in docs/worker.md', () => {
  const missing: string[] = []
  for (const field of Object.keys(DaemonOptionsSchema.properties) as (keyof typeof ENV_NAMES)[]) {
    const flag = field === 'model_files' ? '--model-file' : `--${field.replaceAll('_', '-')}`
    const env = ENV_NAMES[field]
    if (!rows.some((r) => r.includes(`\`${flag}`) && r.includes(env))) missing.push(`${flag} (${env})`)
  }
  expect(missing).toEqual([])
  expect(doc).toContain(CONFIG_ENV)
})
