import { configRows } from '../config'

// The configuration table, generated from the schema in src/config.ts so the docs cannot drift:
// `gridkeep serve --help` prints it as text, `bun run docs:config` writes it into docs/configuration.md
// between the config-table markers, and test/ops/config-docs.test.ts fails when that copy is stale.

export const TABLE_START = '<!-- config-table:start -->'
export const TABLE_END = '<!-- config-table:end -->'

const cell = (s: string) => s.replaceAll('|', '\\|').replaceAll('\n', ' ')

export function configMarkdown(): string {
  const lines = ['| Variable | Default | Description |', '|---|---|---|']
  for (const row of configRows()) {
    const def = row.default === '' ? '' : `\`${cell(row.default)}\``
    lines.push(`| \`${row.name}\` | ${def} | ${cell(row.description)} |`)
  }
  return lines.join('\n')
}

/** Markdown text with the table between the markers replaced. Throws if the markers are missing. */
export function withConfigTable(doc: string): string {
  const start = doc.indexOf(TABLE_START)
  const end = doc.indexOf(TABLE_END)
  if (start < 0 || end < start)
    throw new Error(`the document lacks the ${TABLE_START} / ${TABLE_END} markers`)
  return `${doc.slice(0, start + TABLE_START.length)}\n${configMarkdown()}\n${doc.slice(end)}`
}

/** The table for a terminal: one entry per variable, description wrapped under it. */
export function configHelpText(width = 100): string {
  const out: string[] = []
  for (const row of configRows()) {
    out.push(`  ${row.name}${row.default === '' ? '' : `  (default: ${row.default})`}`)
    for (const line of wrap(row.description, width - 6)) out.push(`      ${line}`)
  }
  return out.join('\n')
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = []
  let line = ''
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line)
      line = word
    } else line = line ? `${line} ${word}` : word
  }
  if (line) lines.push(line)
  return lines
}
