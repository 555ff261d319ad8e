import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { dirname, join } from 'node:path'
import { ClientError, EXIT, usageError } from './exit'

// Where the client keeps the server and the personal key `gridkeep login` made: one JSON file,
// $XDG_CONFIG_HOME/gridkeep/config.json, else ~/.config/gridkeep/config.json, in a directory only
// its owner may enter (0700) and readable only by its owner (0600), since it holds a key. The
// environment wins over the file: GRIDKEEP_SERVER and GRIDKEEP_API_KEY (docs/guide.md "The
// terminal client").

export const DEFAULT_SERVER = 'http://localhost:8080'

export interface ClientConfig {
  server: string
  api_key: string
  /** The key's id when `gridkeep login` created it, so that `gridkeep logout` can revoke it. */
  key_id: string | null
  key_name: string | null
  email: string | null
}

export type Env = Record<string, string | undefined>

export function configPath(env: Env): string {
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config')
  return join(base, 'gridkeep', 'config.json')
}

/** The saved configuration, or null when there is none. A file that is not ours is an error. */
export function readConfig(env: Env): ClientConfig | null {
  const path = configPath(env)
  if (!existsSync(path)) return null
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'))
  } catch (e) {
    throw new ClientError(
      EXIT.usage,
      `${path} is not valid JSON (${(e as Error).message}); delete it and log in again`,
    )
  }
  const c = parsed as Partial<ClientConfig> | null
  if (!c || typeof c.server !== 'string' || typeof c.api_key !== 'string')
    throw new ClientError(EXIT.usage, `${path} has no server and api_key; delete it and log in again`)
  return {
    server: c.server,
    api_key: c.api_key,
    key_id: typeof c.key_id === 'string' ? c.key_id : null,
    key_name: typeof c.key_name === 'string' ? c.key_name : null,
    email: typeof c.email === 'string' ? c.email : null,
  }
}

/** Writes the file whole (a temporary file renamed over it), 0600 in a 0700 directory. */
export function writeConfig(env: Env, config: ClientConfig): string {
  const path = configPath(env)
  const dir = dirname(path)
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  chmodSync(dir, 0o700)
  const temporary = `${path}.${process.pid}.tmp`
  writeFileSync(temporary, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 })
  chmodSync(temporary, 0o600)
  renameSync(temporary, path)
  return path
}

export function removeConfig(env: Env): void {
  rmSync(configPath(env), { force: true })
}

/** A server address as the client uses it: http(s), no trailing slash. */
export function normalizeServer(raw: string): string {
  const trimmed = raw.trim().replace(/\/+$/, '')
  let url: URL
  try {
    url = new URL(trimmed)
  } catch {
    throw usageError(`the server must be an http:// or https:// address, not '${raw}'`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw usageError(`the server must be an http:// or https:// address, not '${raw}'`)
  return trimmed
}

export interface Target {
  server: string
  key: string
  /** Where the key came from, for messages. */
  keySource: 'GRIDKEEP_API_KEY' | 'config'
  config: ClientConfig | null
}

/** The server to talk to: GRIDKEEP_SERVER, else the file's, else the default. */
export function resolveServer(env: Env, config: ClientConfig | null): string {
  return normalizeServer(env.GRIDKEEP_SERVER || config?.server || DEFAULT_SERVER)
}

/** Server and key for a command that needs them; not logged in is an auth failure (exit 4). */
export function resolveTarget(env: Env): Target {
  const config = readConfig(env)
  const server = resolveServer(env, config)
  if (env.GRIDKEEP_API_KEY)
    return { server, key: env.GRIDKEEP_API_KEY, keySource: 'GRIDKEEP_API_KEY', config }
  if (config) return { server, key: config.api_key, keySource: 'config', config }
  throw new ClientError(EXIT.auth, "not logged in: run 'gridkeep login' (or set GRIDKEEP_API_KEY)")
}
