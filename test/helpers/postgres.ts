import { SQL } from 'bun'
import { type PostgresCluster, startPostgres } from '../../scripts/postgres'

// One throwaway PostgreSQL cluster per test process (scripts/postgres.ts), or the one named by
// GRIDKEEP_TEST_POSTGRES_URL; each caller gets a fresh, empty database in it.

let cluster: Promise<PostgresCluster> | undefined

async function baseUrl(): Promise<string> {
  const given = process.env.GRIDKEEP_TEST_POSTGRES_URL
  if (given) return given
  cluster ??= startPostgres().then((c) => {
    process.once('exit', () => c.stop())
    return c
  })
  return (await cluster).url
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
