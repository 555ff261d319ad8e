// `bun run docs:config`: rewrites the configuration table of docs/configuration.md from src/config.ts.
import { readFileSync, writeFileSync } from 'node:fs'
import { withConfigTable } from '../src/ops/config-docs'

const path = new URL('../docs/configuration.md', import.meta.url).pathname
const before = readFileSync(path, 'utf8')
const after = withConfigTable(before)
writeFileSync(path, after)
console.log(
  before === after
    ? 'docs/configuration.md configuration table is up to date'
    : 'docs/configuration.md configuration table updated',
)
