import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import pkg from '../../package.json'

// The compiled gridkeep binary, run as a user runs it. `bun run test:all` builds it once for its
// compiled-binary tier (scripts/test-all.ts) and names it in GRIDKEEP_BINARY; otherwise it is
// built here once per test process, with the flags of `bun run build`, into a temporary directory.

const ROOT = resolve(import.meta.dir, '../..')
let built: { dir: string; path: Promise<string> } | null = null

export function gridkeepBinary(): Promise<string> {
  const given = process.env.GRIDKEEP_BINARY
  if (given) return Promise.resolve(resolve(ROOT, given))
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), 'gk-binary-'))
    built = { dir, path: build(join(dir, 'gridkeep')) }
  }
  return built.path
}

/** Deletes the binary built here (an afterAll's work: 125 MB each; none when GRIDKEEP_BINARY named it). */
export function removeBuiltBinary() {
  if (built) rmSync(built.dir, { recursive: true, force: true })
  built = null
}

async function build(outfile: string): Promise<string> {
  const script = pkg.scripts.build
  if (!script.includes('--outfile dist/gridkeep')) throw new Error(`unexpected build script: ${script}`)
  const argv = script.replace('--outfile dist/gridkeep', `--outfile ${outfile}`).split(/\s+/)
  const proc = Bun.spawn(argv, { cwd: ROOT, stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ])
  if (code !== 0) throw new Error(`${script} failed (${code}):\n${out}${err}`)
  return outfile
}

export interface Ran {
  code: number
  stdout: string
  stderr: string
  /** stdout's JSON lines, parsed (the client's JSON mode: one object per line). */
  lines: any[]
}

const jsonLines = (text: string) =>
  text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l))

/**
 * Runs the binary to its end with exactly `env` (plus PATH), so nothing of the test process (a
 * GRIDKEEP_API_KEY, the user's config directory) leaks in; `stdin` is written and closed.
 */
export async function runGridkeep(
  args: string[],
  o: { env?: Record<string, string>; stdin?: string; cwd?: string } = {},
): Promise<Ran> {
  const proc = Bun.spawn([await gridkeepBinary(), ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...o.env },
    cwd: o.cwd,
    stdin: o.stdin === undefined ? 'ignore' : new Blob([o.stdin]),
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ])
  return { code, stdout, stderr, lines: jsonLines(stdout) }
}

export interface Running {
  proc: Bun.Subprocess<'ignore', 'pipe', 'pipe'>
  /** Resolves with the first JSON line from stdout that matches (seen before or after the call). */
  line(match: (l: any) => boolean): Promise<any>
  /** Waits for the end: exit code, whole stdout and stderr, every JSON line. */
  done(): Promise<Ran>
}

/** Starts the binary and reads its JSON lines as they come, for a test that acts mid-run (SIGINT). */
export async function spawnGridkeep(
  args: string[],
  o: { env?: Record<string, string> } = {},
): Promise<Running> {
  const proc = Bun.spawn([await gridkeepBinary(), ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...o.env },
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
  let stdout = ''
  const waiters = new Set<() => void>()
  const reading = (async () => {
    const decoder = new TextDecoder()
    for await (const chunk of proc.stdout) {
      stdout += decoder.decode(chunk, { stream: true })
      for (const w of [...waiters]) w()
    }
    for (const w of [...waiters]) w()
  })()
  const stderr = new Response(proc.stderr).text()
  return {
    proc,
    line: (match) =>
      new Promise((resolveLine, reject) => {
        const check = () => {
          const found = jsonLines(stdout.slice(0, stdout.lastIndexOf('\n') + 1)).find(match)
          if (found) {
            waiters.delete(check)
            resolveLine(found)
          } else if (proc.exitCode !== null) {
            waiters.delete(check)
            reject(new Error(`the client exited (${proc.exitCode}) without that line:\n${stdout}`))
          }
        }
        waiters.add(check)
        check()
      }),
    async done() {
      const code = await proc.exited
      await reading
      return { code, stdout, stderr: await stderr, lines: jsonLines(stdout) }
    },
  }
}

/**
 * Runs the binary on a pseudo-terminal (stdin, stdout and stderr a TTY), typing each answer once
 * the text it follows is on the screen, as a person would; returns everything the screen showed.
 */
export async function runOnTerminal(
  args: string[],
  o: { env?: Record<string, string>; answers?: { after: string; type: string }[] } = {},
): Promise<{ code: number; screen: string }> {
  let screen = ''
  let answeredUpTo = 0
  const answers = [...(o.answers ?? [])]
  const decoder = new TextDecoder()
  let closed!: () => void
  const eof = new Promise<void>((r) => {
    closed = r
  })
  const proc = Bun.spawn([await gridkeepBinary(), ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', TERM: 'xterm', ...o.env },
    terminal: {
      cols: 160,
      rows: 50,
      data(terminal, data) {
        screen += decoder.decode(data, { stream: true })
        const next = answers[0]
        const at = next ? screen.indexOf(next.after, answeredUpTo) : -1
        if (next && at >= 0) {
          answeredUpTo = at + next.after.length
          answers.shift()
          terminal.write(next.type)
        }
      },
      exit: () => closed(),
    },
  })
  const code = await proc.exited
  await eof
  return { code, screen }
}
