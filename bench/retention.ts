// The retention pass (docs/api.md §15) deleting 10,000 expired files (rows and bytes on local disk) while
// 10,000 batches that have not finished read other inputs (the in-use rule is checked against
// them), beside a bare baseline measured on the same shape of data in this run: one DELETE of the
// due rows and an unlink of each blob, with no rule at all.
//
//   bun run bench/retention.ts            (10,000 files)
//   bun run bench/retention.ts --quick    (2,000 files)

import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { newId } from '../src/lib/ids'
import { runOnce } from '../src/services/retention'
import { benchServer } from './lib/fixture'
import { fmt, quick } from './lib/load'

const FILES = quick ? 2_000 : 10_000
const RUNNING = FILES

const gk = await benchServer({ LOG_LEVEL: 'warn', SWEEP_INTERVAL_SECONDS: '86400' })
const db = gk.deps.sqlite
const root = join(gk.config.DATA_DIR, 'files')
const now = gk.deps.clock.now()
const insertFile = db.prepare(
  `insert into files (id, user_id, filename, purpose, bytes, created_at, expires_at) values (?, ?, 'x.jsonl', ?, 64, ?, ?)`,
)
const insertBatch = db.prepare(
  `insert into batches (id, user_id, input_file_id, endpoint, completion_window, model, status, created_at, updated_at)
   values (?, ?, ?, '/v1/chat/completions', '24h', 'm', 'validated', ?, ?)`,
)

/** `n` files due for expiry, half inputs and half outputs, each with 64 bytes on disk. */
async function dueFiles(n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, () => newId('file-'))
  db.transaction(() => {
    ids.forEach((id, i) => {
      insertFile.run(id, gk.userId, i % 2 ? 'batch' : 'batch_output', now - 100, now - 10)
    })
  })()
  for (const id of ids) await Bun.write(join(root, id), 'x'.repeat(63) + '\n')
  return ids
}

// The batches that have not finished, each reading an input of its own that is not due.
db.transaction(() => {
  for (let i = 0; i < RUNNING; i++) {
    const input = newId('file-')
    insertFile.run(input, gk.userId, 'batch', now, null)
    insertBatch.run(newId('batch_'), gk.userId, input, now, now)
  }
})()

const bareIds = await dueFiles(FILES)
const tb = performance.now()
db.prepare('delete from files where expires_at <= ?').run(now)
for (const id of bareIds) await rm(join(root, id), { force: true })
const bareMs = performance.now() - tb

await dueFiles(FILES)
const t0 = performance.now()
const result = await runOnce(gk.deps)
const passMs = performance.now() - t0
if (result.expired.length !== FILES) throw new Error(`expired ${result.expired.length} of ${FILES}`)

console.log(
  `retention pass: ${fmt(FILES)} expired files deleted (rows and bytes), ${fmt(RUNNING)} unfinished batches checked:`,
)
console.log(`  ${fmt(passMs, 1)} ms (${fmt((FILES / passMs) * 1000)} files/s)`)
console.log(
  `  bare DELETE + unlink of the same number: ${fmt(bareMs, 1)} ms (ratio ${fmt(passMs / bareMs, 2)}×)`,
)
await gk.stop()
process.exit(0)
