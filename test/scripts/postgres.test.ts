import { afterAll, expect, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { POSTGRES_FIX, type PostgresCluster, postgresBinDir, startPostgres } from '../../scripts/postgres'
import { describeWith } from '../helpers/requires'
import { until } from '../helpers/until'

// The throwaway cluster of scripts/postgres.ts, as the test run's last hook uses it (test/setup.ts):
// stop() returns with the server stopped and its directory gone from its name, its files deleted
// in the background (gigabytes with the suite's databases); what a run killed before its stop, or a
// deletion cut short, left behind goes at the next start.

const binaries = { what: 'PostgreSQL server binaries', ok: postgresBinDir() !== null, fix: POSTGRES_FIX }

let cluster: PostgresCluster | undefined
const planted: string[] = []
afterAll(() => {
  cluster?.stop()
  for (const d of planted) rmSync(d, { recursive: true, force: true })
})

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}

describeWith(binaries, 'a throwaway PostgreSQL cluster', () => {
  test('stop(): the server is gone and the directory renamed aside at once, then deleted; leftovers go at the next start', async () => {
    // A deletion cut short, and the cluster of an owner that died without stopping it.
    const made = mkdtempSync(join(tmpdir(), 'gridkeep-pg-'))
    const cutShort = `${made}.removing`
    renameSync(made, cutShort)
    mkdirSync(join(cutShort, 'data', 'base'), { recursive: true })
    writeFileSync(join(cutShort, 'data', 'base', '1'), 'x')
    const orphan = mkdtempSync(join(tmpdir(), 'gridkeep-pg-'))
    const dead = Bun.spawnSync(['true']).pid
    writeFileSync(join(orphan, 'owner'), String(dead))
    planted.push(cutShort, orphan)

    cluster = await startPostgres()
    await until('what was left behind deleted', () => !existsSync(cutShort) && !existsSync(orphan))

    const { dir } = cluster
    const pid = Number(readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0])
    expect(alive(pid)).toBe(true)
    cluster.stop()
    cluster = undefined
    // Its name is free at once: the files go in the background.
    expect(existsSync(dir)).toBe(false)
    await until('the server process gone', () => !alive(pid))
    await until('its files deleted', () => !existsSync(`${dir}.removing`))
  })
})
