import { expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { configRows } from '../../src/config'
import { configMarkdown, TABLE_END, TABLE_START, withConfigTable } from '../../src/ops/config-docs'

// docs/configuration.md's table is generated from src/config.ts (`bun run docs:config`); this
// fails when someone adds or changes a variable without regenerating it.

const doc = readFileSync(join(import.meta.dir, '../../docs/configuration.md'), 'utf8')

test('the table in docs/configuration.md is up to date (run `bun run docs:config`)', () => {
  const start = doc.indexOf(TABLE_START)
  const end = doc.indexOf(TABLE_END)
  expect(start).toBeGreaterThan(0)
  expect(end).toBeGreaterThan(start)
  expect(doc.slice(start + TABLE_START.length, end).trim()).toBe(configMarkdown())
  expect(withConfigTable(doc)).toBe(doc)
})

test('the table has one row per configuration variable, with its default', () => {
  const table = configMarkdown().split('\n').slice(2)
  expect(table).toHaveLength(configRows().length)
  for (const [i, row] of configRows().entries()) {
    expect(table[i]).toStartWith(`| \`${row.name}\` | ${row.default ? `\`${row.default}\`` : ''} |`)
  }
})
