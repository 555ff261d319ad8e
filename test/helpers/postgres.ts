import { SQL } from 'bun'
import { type PostgresCluster, startPostgres } from '../../scripts/postgres'

// One throwaway PostgreSQL cluster per test process (scripts/postgres.ts), or the one named by
// GRIDKEEP_TEST_POSTGRES_URL; each caller gets a fresh, empty database in it.

let cluster: Promise<PostgresCluster> | undefined
let started: PostgresCluster | undefined

async function baseUrl(): Promise<string> {
  const given = process.env.GRIDKEEP_TEST_POSTGRES_URL
  if (given) return given
  cluster ??= startPostgres().then((c) => {
    started = c
    return c
  })
  return (await cluster).url
}

/**
 * Stops this process's cluster, if it started one (test/setup.ts, after every test: `bun test` runs
 * no process 'exit' handler). A run killed before that leaves it to the next start's reaping.
 */
export function stopTestPostgres() {
  started?.stop()
  started = undefined
  cluster = undefined
}

export async function freshPostgresUrl(): Promise<string> {
  const base = await baseUrl()
  const name = `t_${crypto.randomUUID().replaceAll('-', '')}`
  const admin = new SQL({ url: base, max: 1 })
  try {
    await admin.unsafe(`CREATE DATABASE ${name}`)
  } finally {
    await admin.close()
  }
  const url = new URL(base)
  url.pathname = `/${name}`
  return url.toString()
}

// The whole suite on PostgreSQL (GRIDKEEP_TEST_DATABASE=postgres bun test): the preload
// (test/setup.ts) prepares migrated databases up front, so that building a test app stays
// synchronous; testConfig() hands one to each app.

export const testEngine = process.env.GRIDKEEP_TEST_DATABASE === 'postgres' ? 'postgres' : 'sqlite'

const prepared: string[] = []

export async function preparePostgresDatabases(count: number) {
  const { migratePostgres, openPostgres } = await import('../../src/store/postgres/db')
  const template = new URL(await freshPostgresUrl())
  const db = openPostgres({ url: template.toString(), max: 1 })
  await migratePostgres(db)
  await db.$client.close()
  const base = new URL(template)
  base.pathname = '/postgres'
  const admin = new SQL({ url: base.toString(), max: 4 })
  const name = template.pathname.slice(1)
  try {
    // Copied as files: PostgreSQL 15's default (WAL_LOG) also writes each copy through the WAL,
    // nearly a gigabyte more for the suite's databases, and several times slower to make. Before
    // 15, copying the files was the only way.
    const [{ v }] = await admin.unsafe<{ v: number }[]>(
      `SELECT current_setting('server_version_num')::int AS v`,
    )
    const strategy = v >= 150000 ? ' STRATEGY FILE_COPY' : ''
    for (let i = 0; i < count; i += 4) {
      await Promise.all(
        Array.from({ length: Math.min(4, count - i) }, async (_, j) => {
          const clone = `${name}_${i + j}`
          await admin.unsafe(`CREATE DATABASE ${clone} TEMPLATE ${name}${strategy}`)
          const url = new URL(template)
          url.pathname = `/${clone}`
          prepared.push(url.toString())
        }),
      )
    }
  } finally {
    await admin.close()
  }
}

/** A migrated, empty database for one test app (PostgreSQL test mode). */
export function takePostgresDatabase(): string {
  const url = prepared.pop()
  if (!url) throw new Error('test/setup.ts prepared too few PostgreSQL databases: raise the count')
  return url
}
