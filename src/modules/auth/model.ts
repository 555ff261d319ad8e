import { t } from 'elysia'
import { Email, FullName, NewPassword, Password } from '../users/model'

export const AuthModel = {
  signup: t.Object(
    { email: Email, password: NewPassword, full_name: FullName },
    { additionalProperties: false },
  ),
  login: t.Object({ email: Email, password: Password }, { additionalProperties: false }),
  changePassword: t.Object(
    { current_password: Password, new_password: NewPassword },
    { additionalProperties: false },
  ),
  forgotPassword: t.Object({ email: Email }, { additionalProperties: false }),
  resetPassword: t.Object(
    { token: t.String({ minLength: 1, maxLength: 512 }), new_password: NewPassword },
    { additionalProperties: false },
  ),
}

/** docs/api.md §2 "Single sign-on". */
export const SsoModel = {
  methods: t.Object({
    object: t.Literal('auth.methods'),
    password: t.Boolean({ description: 'Email and password sign-in is on (PASSWORD_LOGIN)' }),
    signup: t.Boolean({ description: 'POST /v1/auth/signup is open' }),
    sso: t.Nullable(
      t.Object({
        name: t.String({ description: 'The provider’s name for the button (OIDC_NAME)' }),
        start_url: t.String({ description: 'Where a browser starts a sign-in' }),
      }),
    ),
  }),
  start: t.Object(
    {
      return_to: t.Optional(
        t.String({
          maxLength: 2000,
          description: 'Dashboard: the page of this server to return to (default /app/batches)',
        }),
      ),
      redirect_uri: t.Optional(
        t.String({
          maxLength: 2000,
          description:
            'Terminal (RFC 8252): its loopback address, http://127.0.0.1:PORT/… or http://[::1]:PORT/…',
        }),
      ),
      code_challenge: t.Optional(
        t.String({ maxLength: 128, description: 'Terminal: the PKCE S256 challenge of its verifier' }),
      ),
      code_challenge_method: t.Optional(t.String({ maxLength: 16, description: 'Terminal: S256' })),
      state: t.Optional(
        t.String({ maxLength: 512, description: 'Terminal: its own state, echoed to its loopback' }),
      ),
    },
    { additionalProperties: false },
  ),
  // Described, not validated here: a malformed answer is a 400 invalid_callback, in words for a
  // browser, checked by src/domain/sso-rules.ts checkCallback (a failed schema would answer JSON).
  callback: t.Object(
    {
      code: t.Optional(t.Unknown({ description: 'The authorization code (at most 4096 characters)' })),
      state: t.Optional(t.Unknown({ description: 'The sign-in’s state (at most 512 characters)' })),
      iss: t.Optional(t.Unknown({ description: 'The issuer, RFC 9207 (at most 2000 characters)' })),
      error: t.Optional(t.Unknown({ description: 'The provider’s refusal (at most 200 characters)' })),
      error_description: t.Optional(t.Unknown({ description: 'Its words (at most 2000 characters)' })),
    },
    // Providers add their own parameters (Keycloak's session_state …).
    { additionalProperties: true },
  ),
  token: t.Object(
    {
      code: t.String({ minLength: 1, maxLength: 512, description: 'The one-time code from the callback' }),
      code_verifier: t.Optional(
        t.String({
          minLength: 43,
          maxLength: 128,
          description: 'Terminal: the PKCE verifier of its code_challenge',
        }),
      ),
    },
    { additionalProperties: false },
  ),
}
