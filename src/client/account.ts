import { hostname } from 'node:os'
import { Api, ApiFailure, type KeyRecord, type LoginAnswer, type Transport } from './api'
import { flag, type Parsed, positionals, type Spec, stringOption } from './args'
import {
  type ClientConfig,
  configPath,
  DEFAULT_SERVER,
  type Env,
  normalizeServer,
  readConfig,
  removeConfig,
  writeConfig,
} from './config'
import { ClientError, EXIT, usageError } from './exit'
import { type Prompter, stdinPrompter } from './prompt'
import { signInWithBrowser } from './sso'
import type { View } from './view'

// `gridkeep login` and `gridkeep logout`: the first login of docs/api.md §2 (with its forced
// password change) or a sign-in through the browser (--sso, src/client/sso.ts), a personal key made
// for this machine (§3), kept in the config file; and that key revoked by itself at logout
// (docs/api.md §3, ext).

export interface AccountContext {
  env: Env
  view: View
  interrupt: AbortSignal
  transport?: Transport
}

export const LOGIN_SPEC: Spec = {
  server: { value: true },
  sso: {},
  email: { value: true },
  'password-stdin': {},
  key: { value: true },
  name: { value: true },
}
export const LOGOUT_SPEC: Spec = {}

/** The key's name on the Keys page: which program made it, on which machine (≤ 100 characters). */
export const defaultKeyName = () => `gridkeep-cli@${hostname()}`.slice(0, 100)

/** The saved configuration, ignoring one that cannot be read: login is how a broken one is replaced. */
function previousConfig(env: Env): ClientConfig | null {
  try {
    return readConfig(env)
  } catch {
    return null
  }
}

export async function login(p: Parsed, ctx: AccountContext): Promise<number> {
  const { env, view, interrupt } = ctx
  positionals(p, [])
  const previous = previousConfig(env)
  const server = normalizeServer(
    stringOption(p, 'server') || env.GRIDKEEP_SERVER || previous?.server || DEFAULT_SERVER,
  )
  const key = stringOption(p, 'key')
  const api = new Api(server, null, interrupt, ctx.transport)
  let saved: ClientConfig
  if (key !== undefined && flag(p, 'sso'))
    throw usageError('--sso and --key are two ways to log in: give one')
  if (key !== undefined) {
    if (!key.startsWith('gk-')) throw usageError('--key takes a personal key (gk-…)')
    // Any call a personal key may make tells whether the server takes it.
    await api.json('GET', '/v1/batches?limit=1', { token: key }).catch((e) => {
      throw e instanceof ApiFailure && e.exitCode === EXIT.auth
        ? new ClientError(EXIT.auth, `${server} does not accept this key as a personal key (${e.message})`)
        : e
    })
    saved = { server, api_key: key, key_id: null, key_name: null, email: null }
  } else {
    const email = stringOption(p, 'email')
    const passwordStdin = flag(p, 'password-stdin')
    const sso = flag(p, 'sso')
    if (sso && (email !== undefined || passwordStdin))
      throw usageError('--sso signs in through the browser: it takes no --email or --password-stdin')
    if (passwordStdin && !email) throw usageError('--password-stdin needs --email')
    let answer: LoginAnswer
    let token: string
    if (sso) {
      // docs/api.md §1: a single sign-on session is never held back by must_change_password.
      answer = await signInWithBrowser(api, env, view)
      token = answer.access_token
    } else {
      const write = (text: string) => void process.stderr.write(text)
      const prompter = stdinPrompter(write, interrupt, { lines: passwordStdin })
      const who = email ?? (await prompter.ask('Email: ')).trim()
      if (!who) throw usageError('no email given')
      const password = await prompter.ask('Password: ', { secret: true })
      answer = await api
        .json<LoginAnswer>('POST', '/v1/auth/login', { body: { email: who, password } })
        .catch((e) => {
          throw e instanceof ApiFailure && e.status === 401
            ? new ClientError(EXIT.auth, `wrong email or password for ${server}`, {
                status: 401,
                code: e.code,
              })
            : e
        })
      token = answer.access_token
      if (answer.must_change_password) token = await changePassword(api, view, prompter, token, password)
    }
    const name = stringOption(p, 'name') ?? defaultKeyName()
    const made = await api.json<KeyRecord>('POST', '/v1/users/me/api-keys', { token, body: { name } })
    // The key this machine had from an earlier login is not left behind, still valid.
    if (previous?.key_id && previous.server === server && previous.key_id !== made.id)
      await api
        .send('DELETE', `/v1/users/me/api-keys/${encodeURIComponent(previous.key_id)}`, { token })
        .catch(() => {})
    saved = { server, api_key: made.key!, key_id: made.id, key_name: made.name, email: answer.user.email }
  }
  const path = writeConfig(env, saved)
  const prefix = `${saved.api_key.slice(0, 12)}…`
  view.event('login', {
    server,
    email: saved.email,
    key_id: saved.key_id,
    key_name: saved.key_name,
    key_prefix: saved.api_key.slice(0, 12),
    config: path,
  })
  view.say(
    saved.email
      ? `logged in to ${server} as ${saved.email}; key ${prefix} (${saved.key_name}) saved in ${path}`
      : `key ${prefix} for ${server} saved in ${path}`,
  )
  if (env.GRIDKEEP_API_KEY) view.warn('note: GRIDKEEP_API_KEY is set, and wins over the saved key')
  return EXIT.ok
}

/** docs/api.md §2: a first login must change the password before anything else. */
async function changePassword(
  api: Api,
  view: View,
  prompter: Prompter,
  token: string,
  current: string,
): Promise<string> {
  view.warn('This account must change its password before anything else.')
  // A person gets three tries (a typo, a password the server finds weak); a script gets one.
  for (let attempt = 1; ; attempt++) {
    const next = await prompter.ask('New password: ', { secret: true })
    if (prompter.terminal && (await prompter.ask('Repeat the new password: ', { secret: true })) !== next) {
      if (attempt >= 3) throw usageError('the new passwords did not match')
      view.warn('The two did not match; again.')
      continue
    }
    try {
      const changed = await api.json<{ access_token: string }>('POST', '/v1/auth/change-password', {
        token,
        body: { current_password: current, new_password: next },
      })
      view.say('password changed')
      return changed.access_token
    } catch (e) {
      if (!(e instanceof ApiFailure) || e.status !== 400 || !prompter.terminal || attempt >= 3) throw e
      view.warn(`${e.message}; again.`)
    }
  }
}

export async function logout(p: Parsed, ctx: AccountContext): Promise<number> {
  const { env, view, interrupt } = ctx
  positionals(p, [])
  const config = readConfig(env)
  if (!config) {
    view.event('logout', { revoked: false, config: null })
    view.say(`not logged in (no ${configPath(env)})`)
    if (env.GRIDKEEP_API_KEY)
      view.warn('note: GRIDKEEP_API_KEY is set in the environment; logout does not touch it')
    return EXIT.ok
  }
  const prefix = `${config.api_key.slice(0, 12)}…`
  let revoked = false
  if (config.key_id) {
    // docs/api.md §3 (ext): the key revokes itself. Already refused (revoked, expired) is as good.
    const api = new Api(config.server, config.api_key, interrupt, ctx.transport)
    try {
      await api.send('DELETE', `/v1/users/me/api-keys/${encodeURIComponent(config.key_id)}`)
      revoked = true
    } catch (e) {
      if (!(e instanceof ApiFailure && e.status === 401)) {
        if (e instanceof ClientError)
          throw new ClientError(
            e.exitCode,
            `${e.message}; key ${prefix} is still saved and valid: run 'gridkeep logout' again, or revoke it on the dashboard's Keys page`,
            e.detail,
          )
        throw e
      }
    }
  }
  removeConfig(env)
  view.event('logout', {
    server: config.server,
    key_id: config.key_id,
    key_prefix: config.api_key.slice(0, 12),
    revoked,
  })
  if (revoked) view.say(`logged out of ${config.server}: key ${prefix} revoked and forgotten`)
  else if (config.key_id)
    view.say(`logged out of ${config.server}: key ${prefix} was no longer valid; forgotten`)
  else {
    view.say(`logged out of ${config.server}: key ${prefix} forgotten`)
    view.warn(
      `note: that key was given with --key, not made by 'gridkeep login': it stays valid until you revoke it on the dashboard's Keys page`,
    )
  }
  if (env.GRIDKEEP_API_KEY)
    view.warn('note: GRIDKEEP_API_KEY is set in the environment; logout does not touch it')
  return EXIT.ok
}
