import { describe, expect, test } from 'bun:test'
import { ConfigError, configRows, configWarnings, loadConfig } from '../src/config'

describe('loadConfig', () => {
  test('defaults serve one machine', () => {
    const c = loadConfig({})
    expect(c).toMatchObject({
      PORT: 8080,
      HOST: '0.0.0.0',
      DATA_DIR: './data',
      DATABASE_PATH: 'data/gridkeep.db',
      PUBLIC_URL: 'http://localhost:8080',
      JWT_TTL_SECONDS: 86400,
      ADMIN_EMAIL: 'admin@localhost',
      SIGNUP_ENABLED: true,
      MAX_UPLOAD_BYTES: 200 * 1024 * 1024,
      MAX_LINE_BYTES: 1024 * 1024,
      MAX_REQUESTS_PER_BATCH: 50_000,
      HEARTBEAT_TIMEOUT_SECONDS: 120,
      SWEEP_INTERVAL_SECONDS: 60,
      MAX_BATCH_ATTEMPTS: 3,
      POOL_CACHE_SECONDS: 15,
      MIN_WORKERS_FOR_HARDWARE: 3,
      RESET_TOKEN_TTL_SECONDS: 3600,
      RATE_LIMIT_LOGIN_PER_MINUTE: 10,
      RATE_LIMIT_FORGOT_PER_HOUR: 5,
      RATE_LIMIT_KEYS_PER_MINUTE: 10,
      SQLITE_SYNCHRONOUS: 'normal',
      LOG_LEVEL: 'info',
    })
    expect(c.JWT_SECRET).toBeUndefined()
  })

  test('values are converted and derived paths follow DATA_DIR', () => {
    const c = loadConfig({
      PORT: '9000',
      DATA_DIR: '/srv/gk',
      SIGNUP_ENABLED: 'false',
      PUBLIC_URL: 'https://gk.lab/',
    })
    expect(c.PORT).toBe(9000)
    expect(c.DATABASE_PATH).toBe('/srv/gk/gridkeep.db')
    expect(c.SIGNUP_ENABLED).toBe(false)
    expect(c.PUBLIC_URL).toBe('https://gk.lab')
  })

  test.each([
    ['PORT', 'eighty', /PORT: expected an integer from 0 to 65535/],
    ['PORT', '70000', /PORT/],
    ['MAX_BATCH_ATTEMPTS', '0', /MAX_BATCH_ATTEMPTS/],
    ['LOG_LEVEL', 'loud', /LOG_LEVEL: expected one of debug, info, warn, error/],
    ['SIGNUP_ENABLED', 'maybe', /SIGNUP_ENABLED: expected true or false/],
    ['SQLITE_SYNCHRONOUS', 'off', /SQLITE_SYNCHRONOUS/],
    ['JWT_SECRET', 'short-secret', /JWT_SECRET: expected at least 32 characters/],
  ])('a bad %s stops the start with one line naming it', (name, value, message) => {
    let error: unknown
    try {
      loadConfig({ [name]: value })
    } catch (e) {
      error = e
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as Error).message).toMatch(message)
    expect((error as Error).message.split('\n')).toHaveLength(1)
  })

  test('shard bounds that cross are refused; SHARD_MAX_REQUESTS=0 turns sharding off whatever the minimum', () => {
    expect(() => loadConfig({ SHARD_MIN_REQUESTS: '500', SHARD_MAX_REQUESTS: '400' })).toThrow(
      /^invalid configuration: SHARD_MIN_REQUESTS: expected at most SHARD_MAX_REQUESTS \(400\)/,
    )
    expect(loadConfig({ SHARD_MIN_REQUESTS: '500', SHARD_MAX_REQUESTS: '0' }).SHARD_MAX_REQUESTS).toBe(0)
    expect(loadConfig({})).toMatchObject({ SHARD_MIN_REQUESTS: 100, SHARD_MAX_REQUESTS: 250 })
  })

  test('single sign-on settings that break each other stop the start with one line', () => {
    const sso = { OIDC_ISSUER: 'https://idp.lab.example/realms/lab', OIDC_CLIENT_ID: 'gridkeep' }
    const cases: [Record<string, string>, RegExp][] = [
      [{ OIDC_CLIENT_ID: 'gridkeep' }, /^invalid configuration: OIDC_CLIENT_ID: needs OIDC_ISSUER/],
      [{ OIDC_ADMIN_GROUPS: 'admins' }, /^invalid configuration: OIDC_ADMIN_GROUPS: needs OIDC_ISSUER/],
      [
        { OIDC_ALLOWED_DOMAINS: 'lab.example' },
        /^invalid configuration: OIDC_ALLOWED_DOMAINS: needs OIDC_ISSUER/,
      ],
      [{ PASSWORD_LOGIN: 'false' }, /^invalid configuration: PASSWORD_LOGIN: false needs OIDC_ISSUER/],
      [
        { OIDC_ISSUER: 'https://idp.lab.example' },
        /^invalid configuration: OIDC_CLIENT_ID: required with OIDC_ISSUER/,
      ],
      [{ ...sso, OIDC_ISSUER: 'ftp://idp.lab.example' }, /^invalid configuration: OIDC_ISSUER: expected/],
      [
        { ...sso, OIDC_ISSUER: 'https://idp.lab.example/?realm=x' },
        /^invalid configuration: OIDC_ISSUER: expected/,
      ],
      [{ ...sso, OIDC_SCOPES: 'email profile' }, /^invalid configuration: OIDC_SCOPES: must include openid/],
      [
        { ...sso, OIDC_ALLOWED_DOMAINS: 'lab.example, not a domain' },
        /^invalid configuration: OIDC_ALLOWED_DOMAINS: /,
      ],
      [
        { ...sso, OIDC_ALLOWED_DOMAINS: ' , ' },
        /^invalid configuration: OIDC_ALLOWED_DOMAINS: expected at least one/,
      ],
      [
        { ...sso, OIDC_ADMIN_GROUPS: ',' },
        /^invalid configuration: OIDC_ADMIN_GROUPS: expected at least one/,
      ],
    ]
    for (const [env, message] of cases) {
      let error: unknown
      try {
        loadConfig(env)
      } catch (e) {
        error = e
      }
      expect(error).toBeInstanceOf(ConfigError)
      expect((error as Error).message).toMatch(message)
      expect((error as Error).message.split('\n')).toHaveLength(1)
    }
    expect(() => loadConfig({ ...sso, OIDC_CLIENT_SECRET: 's3cret-value', OIDC_SCOPES: 'email' })).toThrow(
      /OIDC_SCOPES/,
    )
    const ok = loadConfig({
      ...sso,
      PASSWORD_LOGIN: 'false',
      OIDC_ALLOWED_DOMAINS: 'lab.example,uni.example',
    })
    expect(ok).toMatchObject({ PASSWORD_LOGIN: false, OIDC_NAME: 'SSO', OIDC_SCOPES: 'openid email profile' })
    expect(loadConfig({})).toMatchObject({ PASSWORD_LOGIN: true, OIDC_TIMEOUT_SECONDS: 10 })
  })

  test('TRUSTED_PROXIES: unset trusts none; a list of addresses and CIDR ranges; anything else stops the start', () => {
    expect(loadConfig({}).TRUSTED_PROXIES).toBeUndefined()
    expect(loadConfig({ TRUSTED_PROXIES: '127.0.0.1, 10.0.0.0/8,fd00::/8' }).TRUSTED_PROXIES).toBe(
      '127.0.0.1, 10.0.0.0/8,fd00::/8',
    )
    expect(() => loadConfig({ TRUSTED_PROXIES: '127.0.0.1,nginx.lab' })).toThrow(
      new ConfigError(
        'invalid configuration: TRUSTED_PROXIES: expected IP addresses or CIDR ranges separated by commas (got "nginx.lab")',
      ),
    )
    expect(() => loadConfig({ TRUSTED_PROXIES: '10.0.0.0/40' })).toThrow(
      /TRUSTED_PROXIES: .*"10\.0\.0\.0\/40"/,
    )
  })

  test('OIDC_ADMIN_GROUPS without the groups scope is a warning, not a refusal', () => {
    const sso = { OIDC_ISSUER: 'https://idp.lab.example/realms/lab', OIDC_CLIENT_ID: 'gridkeep' }
    const warned = configWarnings(loadConfig({ ...sso, OIDC_ADMIN_GROUPS: 'admins' }))
    expect(warned).toEqual([
      'OIDC_ADMIN_GROUPS is set but OIDC_SCOPES ("openid email profile") does not ask for groups: unless the provider sends the groups claim anyway, no sign-in carries groups and OIDC_ADMIN_GROUPS changes no role',
    ])
    expect(
      configWarnings(
        loadConfig({ ...sso, OIDC_ADMIN_GROUPS: 'admins', OIDC_SCOPES: 'openid  groups email' }),
      ),
    ).toEqual([])
    expect(configWarnings(loadConfig(sso))).toEqual([])
    expect(configWarnings(loadConfig({}))).toEqual([])
  })

  test('a bad secret value is never echoed back', () => {
    expect(() => loadConfig({ JWT_SECRET: 'tiny-secret' })).toThrow(/\*\*\*/)
    try {
      loadConfig({ ADMIN_PASSWORD: 'short' })
    } catch (e) {
      expect((e as Error).message).not.toContain('short')
    }
  })

  test('DATABASE_URL: PostgreSQL only, with JWT_SECRET, never echoing its password', () => {
    const secret = { JWT_SECRET: 'x'.repeat(40) }
    for (const bad of ['mysql://u:hunter2-pw@h/db', 'postgres://', 'not a url hunter2-pw']) {
      let message = ''
      try {
        loadConfig({ ...secret, DATABASE_URL: bad })
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError)
        message = (e as Error).message
      }
      expect(message).toMatch(/^invalid configuration: DATABASE_URL: /)
      expect(message).not.toContain('hunter2')
    }
    expect(() => loadConfig({ DATABASE_URL: 'postgres://u:hunter2-pw@db.lab/gk' })).toThrow(
      /^invalid configuration: JWT_SECRET: required with DATABASE_URL/,
    )
    expect(loadConfig({ ...secret, DATABASE_URL: 'postgresql://u:p@db.lab:5432/gk' }).DATABASE_URL).toBe(
      'postgresql://u:p@db.lab:5432/gk',
    )
  })

  test('every variable has a description for docs/configuration.md and --help', () => {
    const rows = configRows()
    expect(rows.length).toBeGreaterThan(25)
    for (const r of rows) expect(r.description.length).toBeGreaterThan(10)
  })
})
