// `bun run test:all`: every tier of the tests, on a fresh Debian machine with nothing installed by
// hand (the README's second command; .ci/run runs exactly this).
//
// 1. Brings what the tiers need, once; later runs find it and install nothing:
//    - PostgreSQL's server binaries and Debian's chromium-headless-shell, with apt-get (as root, or
//      through `sudo -n`), after one `apt-get update`; a package `dpkg -s` reports installed is
//      left alone;
//    - llama-server, fetched into its cache outside the repository (scripts/llama-server.ts).
//    What cannot be had is one line naming the command that brings it, and one failure.
// 2. Runs the tiers, two at a time (most of a tier's time is spent waiting on servers and
//    subprocesses, not on the CPU): the suite on SQLite with the browser and real-engine tests,
//    the suite again on PostgreSQL, the storage suites on S3, the compiled binary's smoke test
//    and the terminal client's tests against that same binary (built once), biome and the type
//    check. With everything in place, GK_TEST_ALL=1 tells the tests that no suite may be skipped
//    for want of PostgreSQL, Chromium or llama-server.
// 3. Prints each tier's outcome (its whole output when it failed) and, last, `N passed, M failed`:
//    the tests that passed and failed in the suites (the compiled binary's tier counts the
//    client's tests, and fails as one when the build or the smoke test does), plus one for each
//    other tier. Exit code 1 when anything failed.

import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fetchEngine } from './llama-server'
import { postgresBinDir } from './postgres'

const repo = join(import.meta.dir, '..')
const logs = join(repo, 'dist', 'test-logs')
const started = performance.now()
const seconds = (since: number) => ((performance.now() - since) / 1000).toFixed(0)
const sh = (argv: string[]) => {
  const r = Bun.spawnSync(argv, { stdout: 'pipe', stderr: 'pipe', env: { ...process.env } })
  return { ok: r.exitCode === 0, output: `${r.stdout.toString()}${r.stderr.toString()}`.trim() }
}

// ── 1. what the tests need ─────────────────────────────────────────────────────────────────────

const CHROMIUM = process.env.GK_CHROMIUM ?? '/usr/bin/chromium-headless-shell'
const problems: string[] = []

/** apt-get, as root or through passwordless sudo; null when neither is possible here. */
function aptGet(): string[] | null {
  if (!Bun.which('apt-get')) return null
  if (process.getuid?.() === 0) return ['apt-get']
  if (Bun.which('sudo') && sh(['sudo', '-n', 'true']).ok) return ['sudo', '-n', 'apt-get']
  return null
}

const installed = (pkg: string) => /^Status: install ok installed$/m.test(sh(['dpkg', '-s', pkg]).output)

let updated = false
/** Installs the Debian package unless dpkg has it; returns the reason when it cannot. */
function ensurePackage(pkg: string, present: () => boolean): string | null {
  if (present()) return null
  const apt = aptGet()
  const fix = `${process.getuid?.() === 0 ? '' : 'sudo '}apt-get update && ${process.getuid?.() === 0 ? '' : 'sudo '}apt-get install -y --no-install-recommends ${pkg}`
  if (!installed(pkg)) {
    if (!apt) return `${pkg} is not installed and apt-get cannot run here as root; fix: ${fix}`
    console.log(`installing ${pkg} with apt-get (once)`)
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
    if (!updated) {
      const u = Bun.spawnSync([...apt, 'update', '-qq'], { stdout: 'pipe', stderr: 'pipe', env })
      if (u.exitCode !== 0)
        return `apt-get update failed (${u.stderr.toString().trim().split('\n').at(-1)}); fix: ${fix}`
      updated = true
    }
    const i = Bun.spawnSync([...apt, 'install', '-y', '-qq', '--no-install-recommends', pkg], {
      stdout: 'pipe',
      stderr: 'pipe',
      env,
    })
    if (i.exitCode !== 0)
      return `apt-get install ${pkg} failed (${i.stderr.toString().trim().split('\n').at(-1)}); fix: ${fix}`
  }
  return present() ? null : `${pkg} is installed but not where the tests look; fix: ${fix}`
}

const pg = ensurePackage('postgresql', () => postgresBinDir() !== null)
if (pg) problems.push(`PostgreSQL: ${pg}`)
const browser = ensurePackage('chromium-headless-shell', () => Bun.file(CHROMIUM).size > 0)
if (browser) problems.push(`Chromium: ${browser}`)
const engine = fetchEngine()
if (!engine.ok)
  problems.push(
    `llama-server: ${engine.reason}; fix: bun scripts/llama-server.ts fetch (needs the Debian mirror)`,
  )
for (const p of problems) console.log(`cannot run every tier: ${p}`)

// ── 2. the tiers ───────────────────────────────────────────────────────────────────────────────

interface Tier {
  name: string
  argv: string[][]
  env?: Record<string, string>
  /** A bun test run: its pass and fail counts are counted, not the tier as one. */
  suite?: boolean
  timeoutSeconds: number
}

const test = ['bun', 'test', '--timeout', '30000']

// The PostgreSQL tier runs the suite with every test app on PostgreSQL, less what the SQLite tier
// already runs on PostgreSQL or what touches no storage: test/store and test/cluster pick their
// engines themselves, the browser tests, the daemon's own tests (all but its end-to-end run
// against the server), the terminal client's and the libraries' (test/lib: blobs, the limiter on
// its own SQLite) exercise the page, the daemon, the client and the libraries, not the engine. `bun run test:postgres`
// still runs all of it.
const SAME_ON_BOTH = [
  'test/store/',
  'test/cluster/',
  'test/web/',
  'test/scripts/',
  'test/daemon/',
  'test/client/',
  'test/lib/',
]
// The terminal client's end-to-end tests run the compiled binary: in the tier that builds it.
const BINARY_TESTS = 'test/client/binary.test.ts'
const postgresFiles = [...new Bun.Glob('test/**/*.test.ts').scanSync(repo)]
  .filter((f) => f === 'test/daemon/e2e.test.ts' || !SAME_ON_BOTH.some((d) => f.startsWith(d)))
  .sort()
  .map((f) => `./${f}`)

const tiers: Tier[] = [
  // The longest first: two lanes finish together when the long tiers start early.
  {
    name: 'suite on PostgreSQL',
    argv: [[...test, ...postgresFiles]],
    env: { GRIDKEEP_TEST_DATABASE: 'postgres' },
    suite: true,
    timeoutSeconds: 540,
  },
  {
    name: 'suite on SQLite',
    argv: [[...test, `--path-ignore-patterns=${BINARY_TESTS}`]],
    suite: true,
    timeoutSeconds: 540,
  },
  { name: 'storage suites on S3', argv: [['bun', 'scripts/test-s3.ts']], suite: true, timeoutSeconds: 300 },
  {
    // Its passes are the client's tests; a failed build or smoke test fails it as one.
    name: 'compiled binary smoke test',
    argv: [
      ['bun', 'run', 'build'],
      ['bun', 'scripts/smoke.ts', 'dist/gridkeep'],
      [...test, `./${BINARY_TESTS}`],
    ],
    env: { GRIDKEEP_BINARY: 'dist/gridkeep' },
    suite: true,
    timeoutSeconds: 300,
  },
  { name: 'biome ci', argv: [['bunx', 'biome', 'ci', '.']], timeoutSeconds: 120 },
  { name: 'type check', argv: [['bun', 'run', 'typecheck']], timeoutSeconds: 300 },
]

interface Outcome {
  tier: Tier
  ok: boolean
  output: string
  seconds: string
  passed: number
  failed: number
  skipped: number
}

/**
 * Tests by outcome, from bun's line per test (there even when a killed run has no summary); bun
 * lists the failed and skipped ones again under its closing "N tests failed:", which is left out.
 */
const count = (output: string, word: string) =>
  output.split(/^\s*\d+ tests? (?:failed|skipped|todo):?$/m)[0]!.match(new RegExp(`^\\(${word}\\) `, 'gm'))
    ?.length ?? 0

async function run(tier: Tier): Promise<Outcome> {
  const since = performance.now()
  let output = ''
  let ok = true
  const env: Record<string, string | undefined> = { ...process.env, ...tier.env }
  if (problems.length === 0) env.GK_TEST_ALL = '1'
  for (const argv of tier.argv) {
    output += `$ ${argv.join(' ')}\n`
    const proc = Bun.spawn(argv, { cwd: repo, env, stdout: 'pipe', stderr: 'pipe' })
    const timer = setTimeout(() => {
      output += `\n(killed after ${tier.timeoutSeconds} s)\n`
      proc.kill('SIGKILL')
    }, tier.timeoutSeconds * 1000)
    const [out, err] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()])
    const code = await proc.exited
    clearTimeout(timer)
    output += out + err
    if (code !== 0) {
      ok = false
      break
    }
  }
  const passed = tier.suite ? count(output, 'pass') : ok ? 1 : 0
  // A crash before bun's summary fails the tier even when no test reported a failure.
  const failed = tier.suite ? Math.max(count(output, 'fail'), ok ? 0 : 1) : ok ? 0 : 1
  return {
    tier,
    ok,
    output,
    seconds: seconds(since),
    passed,
    failed,
    skipped: tier.suite ? count(output, 'skip') : 0,
  }
}

const LANES = Number(process.env.GK_TEST_LANES ?? 2)
const queue = [...tiers]
const outcomes: Outcome[] = []
mkdirSync(logs, { recursive: true })
await Promise.all(
  Array.from({ length: LANES }, async () => {
    for (let tier = queue.shift(); tier; tier = queue.shift()) {
      console.log(`started: ${tier.name}`)
      const o = await run(tier)
      outcomes.push(o)
      const file = join(logs, `${tier.name.replaceAll(' ', '-')}.log`)
      writeFileSync(file, o.output)
      const counts = tier.suite ? `: ${o.passed} pass, ${o.skipped} skip, ${o.failed} fail` : ''
      if (!o.ok)
        console.log(`\n──── ${tier.name}: its output ────\n${o.output}\n──── end of ${tier.name} ────`)
      console.log(`${o.ok ? 'ok' : 'FAILED'}: ${tier.name} (${o.seconds} s${counts}; log ${file})`)
    }
  }),
)

// ── 3. the count ───────────────────────────────────────────────────────────────────────────────

let passed = 0
let failed = problems.length
let skipped = 0
for (const o of outcomes) {
  passed += o.passed
  failed += o.failed
  skipped += o.skipped
}
for (const p of problems) console.log(`cannot run every tier: ${p}`)
if (skipped) console.log(`${skipped} skipped (each with its reason in the tier's log)`)
console.log(`all tiers in ${seconds(started)} s`)
console.log(`${passed} passed, ${failed} failed`)
process.exit(failed === 0 ? 0 : 1)
