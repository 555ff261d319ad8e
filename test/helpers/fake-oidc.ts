// A hand-rolled OpenID provider whose ID tokens are wrong on purpose (docs/api.md §2 "Single
// sign-on", errors): a wrong issuer or audience, expired, unsigned, a bad signature, a wrong nonce.
// The real provider (test/helpers/oidc-provider.ts) never issues such tokens. In-process: discovery,
// an authorization endpoint that answers at once (no login page), a token endpoint and the JWKS.

export type TokenFault =
  | 'none'
  | 'wrong_issuer'
  | 'wrong_audience'
  | 'expired'
  | 'unsigned'
  | 'bad_signature'
  | 'wrong_nonce'
  /** The token endpoint answers 500: the provider is broken, not the token. */
  | 'token_endpoint_error'

export interface FakeOidc {
  issuer: string
  fault: TokenFault
  /** The ID token's claims beyond iss, sub, aud, exp, iat and nonce. */
  claims: Record<string, unknown>
  /** Codes the token endpoint was asked for (each answers once, as a provider's do). */
  redeemed: string[]
  stop(): void
}

const b64 = (data: string | Uint8Array | ArrayBuffer) =>
  Buffer.from(typeof data === 'string' ? data : new Uint8Array(data)).toString('base64url')

export async function startFakeOidc(clientId: string): Promise<FakeOidc> {
  const keys = (await crypto.subtle.generateKey(
    {
      name: 'RSASSA-PKCS1-v1_5',
      modulusLength: 2048,
      publicExponent: new Uint8Array([1, 0, 1]),
      hash: 'SHA-256',
    },
    true,
    ['sign', 'verify'],
  )) as CryptoKeyPair
  const jwk = {
    ...(await crypto.subtle.exportKey('jwk', keys.publicKey)),
    kid: 'fake-key',
    alg: 'RS256',
    use: 'sig',
  }
  const codes = new Map<string, { nonce: string }>()
  let issuer = ''

  async function idToken(nonce: string): Promise<string> {
    const now = Math.floor(Date.now() / 1000)
    const payload: Record<string, unknown> = {
      iss: fake.fault === 'wrong_issuer' ? 'http://127.0.0.1:1/another-issuer' : issuer,
      sub: 'fake-subject',
      aud: fake.fault === 'wrong_audience' ? 'another-client' : clientId,
      iat: fake.fault === 'expired' ? now - 3600 : now,
      exp: fake.fault === 'expired' ? now - 600 : now + 300,
      nonce: fake.fault === 'wrong_nonce' ? 'another-nonce' : nonce,
      ...fake.claims,
    }
    const header =
      fake.fault === 'unsigned' ? { alg: 'none', typ: 'JWT' } : { alg: 'RS256', kid: 'fake-key', typ: 'JWT' }
    const signingInput = `${b64(JSON.stringify(header))}.${b64(JSON.stringify(payload))}`
    if (fake.fault === 'unsigned') return `${signingInput}.`
    const signature = await crypto.subtle.sign(
      'RSASSA-PKCS1-v1_5',
      keys.privateKey,
      new TextEncoder().encode(signingInput),
    )
    if (fake.fault === 'bad_signature') {
      const tampered = `${b64(JSON.stringify(header))}.${b64(JSON.stringify({ ...payload, sub: 'someone-else' }))}`
      return `${tampered}.${b64(signature)}`
    }
    return `${signingInput}.${b64(signature)}`
  }

  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      switch (url.pathname) {
        case '/.well-known/openid-configuration':
          return Response.json({
            issuer,
            authorization_endpoint: `${issuer}/authorize`,
            token_endpoint: `${issuer}/token`,
            jwks_uri: `${issuer}/jwks`,
            response_types_supported: ['code'],
            subject_types_supported: ['public'],
            id_token_signing_alg_values_supported: ['RS256'],
            code_challenge_methods_supported: ['S256'],
            token_endpoint_auth_methods_supported: ['client_secret_basic'],
          })
        case '/jwks':
          return Response.json({ keys: [jwk] })
        case '/authorize': {
          const code = crypto.randomUUID()
          codes.set(code, { nonce: url.searchParams.get('nonce') ?? '' })
          const back = new URL(url.searchParams.get('redirect_uri')!)
          back.searchParams.set('code', code)
          back.searchParams.set('state', url.searchParams.get('state') ?? '')
          return new Response(null, { status: 302, headers: { location: back.href } })
        }
        case '/token': {
          const code = new URLSearchParams(await req.text()).get('code') ?? ''
          fake.redeemed.push(code)
          if (fake.fault === 'token_endpoint_error') return new Response('upstream exploded', { status: 500 })
          const issued = codes.get(code)
          codes.delete(code)
          if (!issued) return Response.json({ error: 'invalid_grant' }, { status: 400 })
          return Response.json(
            {
              access_token: 'fake-access-token',
              token_type: 'Bearer',
              expires_in: 300,
              id_token: await idToken(issued.nonce),
            },
            { headers: { 'cache-control': 'no-store' } },
          )
        }
      }
      return new Response('not found', { status: 404 })
    },
  })
  issuer = `http://127.0.0.1:${server.port}`
  const fake: FakeOidc = {
    issuer,
    fault: 'none',
    claims: {},
    redeemed: [],
    stop: () => void server.stop(true),
  }
  return fake
}
