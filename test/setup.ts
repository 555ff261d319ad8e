import { afterAll, expect, setDefaultTimeout } from 'bun:test'
import { log, setLogSink } from '../src/lib/logger'
import { stopOwnChildren } from './helpers/children'
import { preparePostgresDatabases, stopTestPostgres, testEngine } from './helpers/postgres'
import { capturedLogLines, captureLogLine, leakedSecrets, secretCount } from './helpers/secrets'

// Tests that start real servers and subprocesses must not fail on a slow CI machine. Bun 1.4.5
// ignores bunfig's [test] timeout and applies this to the first test file only: `bun run test`
// and `bun run test:all` pass `--timeout 30000`, which holds for every file.
setDefaultTimeout(30_000)

// The suite on PostgreSQL: one migrated database per test app, made before the first test (a run
// of every file builds about 225: raise this when tests add apps).
if (testEngine === 'postgres') await preparePostgresDatabases(240)

// Keep every log line of the whole suite (GK_TEST_LOG=1 also prints them) and fail the run if any
// secret the tests handled shows up in them.
setLogSink((line) => {
  captureLogLine(line)
  if (process.env.GK_TEST_LOG) process.stdout.write(line + '\n')
})

// Proves the capture works through the real logger, so the scan below can never be vacuous.
log.info('test suite log capture started')

// Nothing a test started outlives the run: `bun test` runs no process 'exit' handler, so a test that
// failed before its own cleanup is covered here, and so is the run's PostgreSQL cluster.
afterAll(async () => {
  await stopOwnChildren()
  stopTestPostgres()
})

afterAll(() => {
  const leaks = leakedSecrets()
  if (leaks.length) console.error(`secrets found in log output: ${leaks.length} of ${secretCount()}`)
  expect(leaks.map((s) => s.slice(0, 6) + '…')).toEqual([])
  expect(capturedLogLines().some((l) => l.includes('test suite log capture started'))).toBe(true)
})
