// `bun run docs:config`: rewrites the configuration table of README.md from src/config.ts.
import { readFileSync, writeFileSync } from 'node:fs'
import { withConfigTable } from '../src/ops/config-docs'

const path = new URL('../README.md', import.meta.url).pathname
const before = readFileSync(path, 'utf8')
const after = withConfigTable(before)
writeFileSync(path, after)
console.log(
  before === after ? 'README.md configuration table is up to date' : 'README.md configuration table updated',
)
