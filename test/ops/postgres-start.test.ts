import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SQL } from 'bun'
import { ownProcess } from '../helpers/children'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'

// docs/api.md §12: a DATABASE_URL that is unreachable or lacks permissions stops the start with one
// line naming the variable, never echoing the password.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

async function serve(databaseUrl: string) {
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-pgstart-'))
  dirs.push(dir)
  const proc = ownProcess(
    Bun.spawn(['bun', 'src/cli.ts', 'serve'], {
      env: {
        ...process.env,
        DATA_DIR: dir,
        PORT: '0',
        HOST: '127.0.0.1',
        JWT_SECRET: 'j'.repeat(40),
        DATABASE_URL: databaseUrl,
      },
      stdout: 'pipe',
      stderr: 'pipe',
    }),
  )
  const code = await proc.exited
  return { code, stderr: await new Response(proc.stderr).text() }
}

describeWith(postgres, 'gridkeep serve with a DATABASE_URL it cannot use', () => {
  test('unreachable: exit 2, one line naming DATABASE_URL, no password', async () => {
    const { code, stderr } = await serve('postgres://gk:hunter2-secret@127.0.0.1:1/gk')
    expect(code).toBe(2)
    const lines = stderr.trim().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^gridkeep: DATABASE_URL: cannot use the database: /)
    expect(stderr).not.toContain('hunter2')
  })

  test('a role that may not create the schema: exit 2 naming DATABASE_URL', async () => {
    const url = new URL(await freshPostgresUrl())
    const admin = new SQL({ url: url.toString(), max: 1 })
    await admin.unsafe(`CREATE ROLE gk_weak_${process.pid} LOGIN PASSWORD 'hunter2-weak'`)
    await admin.close()
    url.username = `gk_weak_${process.pid}`
    url.password = 'hunter2-weak'
    const { code, stderr } = await serve(url.toString())
    expect(code).toBe(2)
    expect(stderr.trim().split('\n')).toHaveLength(1)
    expect(stderr).toMatch(/^gridkeep: DATABASE_URL: cannot use the database: .*permission denied/i)
    expect(stderr).not.toContain('hunter2')
  })
})
