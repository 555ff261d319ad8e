import { describe, expect, test } from 'bun:test'
import pkg from '../../package.json'
import { type Io, main } from '../../src/cli'
import { configRows } from '../../src/config'
import { CLI, PROCESS_TEST_TIMEOUT } from '../helpers/ops'

// `gridkeep <serve|worker|catalogue|backup|version>` (issue 6): dispatch, --help of every command.

function capture(env: Record<string, string> = {}) {
  const out: string[] = []
  const err: string[] = []
  const io: Io = { out: (s) => void out.push(s), err: (s) => void err.push(s), env }
  return { io, out: () => out.join('\n'), err: () => err.join('\n') }
}

async function run(argv: string[]) {
  const c = capture()
  const code = await main(argv, c.io)
  return { code, out: c.out(), err: c.err() }
}

describe('gridkeep CLI', () => {
  test('--help, -h and help list every command', async () => {
    for (const argv of [['--help'], ['-h'], ['help']]) {
      const r = await run(argv)
      expect(r.code).toBe(0)
      expect(r.out).toContain('Usage: gridkeep [command]')
      for (const command of ['serve', 'worker', 'catalogue', 'backup', 'version'])
        expect(r.out).toMatch(new RegExp(`^  ${command} `, 'm'))
    }
  })

  test('version prints the package version and the Bun version', async () => {
    for (const argv of [['version'], ['--version']]) {
      const r = await run(argv)
      expect(r.code).toBe(0)
      expect(r.out).toBe(`gridkeep ${pkg.version} (bun ${Bun.version})`)
    }
  })

  test('serve --help prints the configuration table from the schema', async () => {
    for (const argv of [
      ['serve', '--help'],
      ['serve', '-h'],
      ['help', 'serve'],
    ]) {
      const r = await run(argv)
      expect(r.code).toBe(0)
      expect(r.out).toContain('Usage: gridkeep serve')
      for (const row of configRows()) {
        expect(r.out).toMatch(new RegExp(`^  ${row.name}\\b`, 'm'))
        if (row.default) expect(r.out).toContain(`${row.name}  (default: ${row.default})`)
        expect(r.out).toContain(row.description.split(' ').slice(0, 3).join(' '))
      }
    }
  })

  test('backup --help explains usage, --force and restore', async () => {
    const r = await run(['backup', '--help'])
    expect(r.code).toBe(0)
    expect(r.out).toContain('Usage: gridkeep backup <path> [--force]')
    expect(r.out).toContain('Restore:')
  })

  test('worker --help and catalogue --help answer with exit code 0', async () => {
    for (const command of ['worker', 'catalogue']) {
      const r = await run([command, '--help'])
      expect(r.code).toBe(0)
    }
  })

  test('an unknown command or a stray argument to serve is a usage error (exit 2), nothing starts', async () => {
    let r = await run(['frobnicate'])
    expect(r.code).toBe(2)
    expect(r.err).toBe("gridkeep: unknown command 'frobnicate'. Run 'gridkeep --help' for the list.")
    r = await run(['serve', 'now'])
    expect(r.code).toBe(2)
    expect(r.err).toContain("unexpected argument 'now'")
  })

  test(
    'runs as a program: `bun src/cli.ts version`, and a bad configuration stops serve with one line',
    async () => {
      const version = Bun.spawn(['bun', CLI, 'version'], { stdout: 'pipe', stderr: 'pipe' })
      expect(await version.exited).toBe(0)
      expect((await new Response(version.stdout).text()).trim()).toBe(
        `gridkeep ${pkg.version} (bun ${Bun.version})`,
      )

      const bad = Bun.spawn(['bun', CLI], {
        env: { PATH: process.env.PATH ?? '', PORT: 'eighty', JWT_SECRET: 'short-secret' },
        stdout: 'pipe',
        stderr: 'pipe',
      })
      expect(await bad.exited).toBe(2)
      const err = (await new Response(bad.stderr).text()).trim()
      expect(err.split('\n')).toHaveLength(1)
      expect(err).toStartWith('gridkeep: invalid configuration: ')
      expect(err).not.toContain('short-secret')
    },
    PROCESS_TEST_TIMEOUT,
  )
})
