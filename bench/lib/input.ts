import { mkdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

// The benchmarks' input files, made once and kept in bench/.out (not in git): `lines` chat
// requests for `model`, padded to `bytes` in total — the 200 MB, 50,000-line file of
// bench/validation.ts and bench/client.ts.

export async function chatInputFile(lines: number, bytes: number, model: string): Promise<string> {
  const outDir = join(import.meta.dir, '..', '.out')
  mkdirSync(outDir, { recursive: true })
  const path = join(outDir, `chat-${lines}-${bytes}.jsonl`)
  try {
    if (statSync(path).size > 0) return path
  } catch {}
  const skeleton = (i: number, pad: string) =>
    JSON.stringify({
      custom_id: `request-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: {
        model,
        max_tokens: 256,
        messages: [
          { role: 'system', content: 'You are a helpful assistant.' },
          { role: 'user', content: pad },
        ],
      },
    })
  const padLength = Math.max(0, Math.floor(bytes / lines) - skeleton(lines, '').length - 1)
  // ASCII only, so characters and bytes agree and the file lands on `bytes`.
  const words = 'the quick brown fox jumps over a lazy dog while "quoted" text\tand escapes flow by '
  const escaped = JSON.stringify(words).length - 2 // quotes and tabs grow when escaped
  const chars = Math.floor((padLength * words.length) / escaped)
  const pad = words.repeat(Math.ceil(chars / words.length)).slice(0, chars)
  const writer = Bun.file(path).writer()
  for (let i = 0; i < lines; i++) writer.write(`${skeleton(i, pad)}\n`)
  await writer.end()
  return path
}

/**
 * `lines` chat requests for `model` whose prompts are keyed for the execution order (docs/api.md §6:
 * over 256 characters, about 600 here): `distinct` — no two share a leading part; `shared` —
 * documents × questions written question-major, 50 questions of each ~540-character document, so
 * the 256- and 512-character levels are shared by a document's lines and the whole prompts are not.
 */
export async function keyedInputFile(lines: number, shape: 'distinct' | 'shared', model: string) {
  const outDir = join(import.meta.dir, '..', '.out')
  mkdirSync(outDir, { recursive: true })
  const path = join(outDir, `keyed-${shape}-${lines}-${model}.jsonl`)
  try {
    if (statSync(path).size > 0) return path
  } catch {}
  const words = 'the quick brown fox jumps over a lazy dog while plain text and numbers flow by '
  const text = (seed: string, chars: number) =>
    `${seed}. ${words.repeat(Math.ceil(chars / words.length))}`.slice(0, chars)
  const QUESTIONS = 50
  const docs = Math.ceil(lines / QUESTIONS)
  const content = (i: number) =>
    shape === 'distinct'
      ? text(`Record ${i}`, 600)
      : `${text(`Document ${i % docs}`, 540)}\nQuestion ${Math.floor(i / docs)}: what does it say about that?`
  const writer = Bun.file(path).writer()
  for (let i = 0; i < lines; i++)
    writer.write(
      `${JSON.stringify({
        custom_id: `request-${i}`,
        body: {
          model,
          max_tokens: 64,
          messages: [
            { role: 'system', content: 'You are a helpful assistant.' },
            { role: 'user', content: content(i) },
          ],
        },
      })}\n`,
    )
  await writer.end()
  return path
}
