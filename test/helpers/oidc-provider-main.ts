import { generateKeyPairSync, randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage } from 'node:http'
import Provider from 'oidc-provider'

// A real OpenID provider for the tests (docs/api.md §2 "Single sign-on"): oidc-provider, run as its
// own process by test/helpers/oidc-provider.ts. Its development interactions are the login and
// consent pages (any login names an account below; the password is not checked). On stdout it
// prints one JSON line, {"issuer": …}, once it listens.
//
// The test drives it through /__test/configure (JSON): `redirect_uris` (the gridkeep callbacks it
// accepts), `accounts` (claims per account id, merged), `rotate: true` (a new signing key replaces
// the old one in its JWKS). The provider is rebuilt with the change.

interface Options {
  client_id: string
  client_secret: string
  redirect_uris: string[]
  accounts: Record<string, Record<string, unknown>>
  /** How long an ID token it issues is valid. */
  id_token_ttl: number
}

const options = JSON.parse(process.env.OP_OPTIONS ?? '{}') as Options

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' }
}

let key = signingKey()
let provider: Provider
let issuer = ''

function build() {
  provider = new Provider(issuer, {
    clients: [
      {
        client_id: options.client_id,
        client_secret: options.client_secret,
        redirect_uris: options.redirect_uris,
        response_types: ['code'],
        grant_types: ['authorization_code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    jwks: { keys: [key] as never },
    cookies: { keys: ['gridkeep-test-provider-cookie-key'] },
    ttl: { IdToken: options.id_token_ttl },
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'given_name', 'family_name', 'preferred_username'],
      groups: ['groups'],
    },
    async findAccount(_ctx: unknown, id: string) {
      const claims = options.accounts[id]
      if (!claims) return undefined
      return { accountId: id, claims: async () => ({ sub: id, ...options.accounts[id] }) }
    },
    features: { devInteractions: { enabled: true } },
  })
  // The development pages' stack traces are noise in a test's output.
  provider.on('server_error', (_ctx, error) => console.error('provider server_error', error))
}

async function readJson(req: IncomingMessage): Promise<any> {
  let text = ''
  for await (const chunk of req) text += chunk
  return text ? JSON.parse(text) : {}
}

const server = createServer(async (req, res) => {
  if (req.url === '/__test/configure' && req.method === 'POST') {
    const change = await readJson(req)
    if (change.redirect_uris) options.redirect_uris = change.redirect_uris
    for (const [id, claims] of Object.entries(change.accounts ?? {}))
      options.accounts[id] = { ...options.accounts[id], ...(claims as object) }
    if (change.rotate) key = signingKey()
    build()
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ kid: key.kid }))
    return
  }
  provider.callback()(req, res)
})

server.listen(0, '127.0.0.1', () => {
  const address = server.address()
  if (!address || typeof address === 'string') throw new Error('no port')
  issuer = `http://127.0.0.1:${address.port}`
  build()
  process.stdout.write(`${JSON.stringify({ issuer, kid: key.kid })}\n`)
})
