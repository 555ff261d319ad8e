// A throwaway PostgreSQL cluster on loopback for tests and benchmarks (docs/api.md §12), from Debian's
// `postgresql` package: initdb in a temporary directory, started on a free port, stopped by PID.
// PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres` user.
//
//   bun scripts/postgres.ts start   prints the admin URL and the data directory, leaves it running
//   bun scripts/postgres.ts stop DIR
//
// Tests use startPostgres() once per process (test/helpers/postgres.ts), or the cluster named by
// GRIDKEEP_TEST_POSTGRES_URL when set.
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface PostgresCluster {
  url: string
  dir: string
  /** Shuts the server down (fast: open connections are cut), keeping its data. */
  pause(): void
  /** Starts it again on the same port. */
  resume(): void
  /** Stops the server (it is down when this returns) and deletes its files in the background. */
  stop(): void
}

/** The one command that brings the server binaries on Debian. */
export const POSTGRES_FIX = 'apt-get install -y --no-install-recommends postgresql'

/** The newest installed server's bin directory, or null. */
export function postgresBinDir(): string | null {
  const root = '/usr/lib/postgresql'
  if (!existsSync(root)) return null
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a))
  return versions[0] ? join(root, versions[0], 'bin') : null
}

function binDir(): string {
  const bin = postgresBinDir()
  if (!bin) throw new Error(`PostgreSQL server binaries not found (${POSTGRES_FIX})`)
  return bin
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => resolve(port))
    })
  })
}

function run(argv: string[], asPostgres: boolean) {
  const cmd = asPostgres ? ['runuser', '-u', 'postgres', '--', ...argv] : argv
  const r = Bun.spawnSync(cmd, { stdout: 'pipe', stderr: 'pipe' })
  // initdb writes some of its reasons to stdout: both are kept, or a failure says nothing.
  if (r.exitCode !== 0)
    throw new Error(
      `${argv[0]} failed (exit ${r.exitCode ?? r.signalCode}): ${`${r.stdout}${r.stderr}`.slice(-2000)}`,
    )
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** What a stopped cluster's directory is renamed to while it is deleted. */
const REMOVING = '.removing'

/**
 * Deletes a stopped cluster's directory without waiting for it. With the suite's databases it holds
 * gigabytes in some 95,000 files; deleting them took 25 to 55 s on a busy disk (on a filesystem
 * mounted with `discard`, every freed extent is discarded before the unlink returns), past the 30 s
 * the test run's last hook may take. The directory is renamed aside at once and deleted by a
 * detached `rm -rf` that outlives this process (its output nobody's, so a runner reading this
 * process's output does not wait for it); one cut short is finished by the next start (reapOrphans).
 */
function removeInBackground(dir: string) {
  let aside = dir
  if (!dir.endsWith(REMOVING)) {
    aside = `${dir}${REMOVING}`
    try {
      renameSync(dir, aside)
    } catch {
      aside = dir
    }
  }
  Bun.spawn(['rm', '-rf', aside], { stdio: ['ignore', 'ignore', 'ignore'], detached: true }).unref()
}

/**
 * Removes the clusters of test processes that died without stopping theirs (a SIGKILLed or timed-out
 * `bun test` never runs its exit hook); each cluster names its owner's PID in `owner`. A cluster
 * holds gigabytes once the suite's databases are prepared, so leaked ones fill a disk quickly.
 * They are stopped here and deleted in the background, as is a stopped one whose deletion was cut
 * short.
 */
function reapOrphans(bin: string, asPostgres: boolean) {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith('gridkeep-pg-')) continue
    const dir = join(tmpdir(), name)
    if (name.endsWith(REMOVING)) {
      removeInBackground(dir)
      continue
    }
    let owner: number
    try {
      owner = Number(readFileSync(join(dir, 'owner'), 'utf8'))
    } catch {
      continue // started by `bun scripts/postgres.ts start`, or still being created
    }
    if (!owner || alive(owner)) continue
    try {
      run([join(bin, 'pg_ctl'), '-D', join(dir, 'data'), '-m', 'immediate', '-w', 'stop'], asPostgres)
    } catch {
      // not running
    }
    removeInBackground(dir)
  }
}

/** `owned`: the cluster belongs to this process and is reaped by a later start once it is gone. */
export async function startPostgres({ owned = true }: { owned?: boolean } = {}): Promise<PostgresCluster> {
  const bin = binDir()
  const root = process.getuid?.() === 0
  reapOrphans(bin, root)
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-pg-'))
  chmodSync(dir, 0o700)
  if (owned) writeFileSync(join(dir, 'owner'), String(process.pid))
  if (root) {
    const uid = Number(Bun.spawnSync(['id', '-u', 'postgres']).stdout.toString())
    const gid = Number(Bun.spawnSync(['id', '-g', 'postgres']).stdout.toString())
    chownSync(dir, uid, gid)
  }
  const data = join(dir, 'data')
  run([join(bin, 'initdb'), '-D', data, '-A', 'trust', '-U', 'gridkeep', '--no-sync', '-E', 'UTF8'], root)
  const port = await freePort()
  // Durability off: a test cluster is thrown away. Enough connections for several instances.
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300`
  const start = () =>
    run([join(bin, 'pg_ctl'), '-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', 'start'], root)
  start()
  const pause = () => run([join(bin, 'pg_ctl'), '-D', data, '-m', 'fast', '-w', 'stop'], root)
  // Stopped before this returns (no server outlives its owner); its files go in the background.
  const stop = () => {
    try {
      run([join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', '-w', 'stop'], root)
    } catch {
      // already stopped
    }
    removeInBackground(dir)
  }
  return { url: `postgres://gridkeep@127.0.0.1:${port}/postgres`, dir, pause, resume: start, stop }
}

if (import.meta.main) {
  const [verb, arg] = process.argv.slice(2)
  if (verb === 'start') {
    const cluster = await startPostgres({ owned: false })
    console.log(cluster.url)
    console.log(cluster.dir)
  } else if (verb === 'stop' && arg) {
    run(
      [join(binDir(), 'pg_ctl'), '-D', join(arg, 'data'), '-m', 'immediate', '-w', 'stop'],
      process.getuid?.() === 0,
    )
    rmSync(arg, { recursive: true, force: true })
  } else {
    console.error('usage: bun scripts/postgres.ts start | stop DIR')
    process.exit(2)
  }
}
