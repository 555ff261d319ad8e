import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { auditContext } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody, optionalJsonBody } from '../../http/parse'
import { KeyModel } from '../keys/model'
import { regenerateKey } from '../keys/service'
import { AuthModel } from './model'
import * as auth from './service'

const tags = ['auth']

export const authRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.auth', prefix: '/v1/auth' })
    .use(authPlugin(deps))
    .post('/signup', ({ body, request, server }) => auth.signup(deps, body, auditContext(request, server)), {
      public: true,
      ...jsonBody(AuthModel.signup),
      detail: { tags, summary: 'Register; creates the user and their Personal Org' },
    })
    .post('/login', ({ body, request, server }) => auth.login(deps, body, auditContext(request, server)), {
      public: true,
      ...jsonBody(AuthModel.login),
      detail: { tags, summary: 'Log in; returns a JWT' },
    })
    .get('/me', ({ principal }) => auth.me(deps, principal), {
      session: true,
      detail: { tags, summary: 'Current profile and org memberships' },
    })
    .post(
      '/change-password',
      ({ body, principal, request, server }) =>
        auth.changePassword(deps, principal, body, auditContext(request, server)),
      {
        session: true,
        ...jsonBody(AuthModel.changePassword),
        detail: { tags, summary: 'Change the password; returns a fresh JWT' },
      },
    )
    .post(
      '/forgot-password',
      async ({ body, status }) => status(202, await auth.forgotPassword(deps, body)),
      {
        public: true,
        ...jsonBody(AuthModel.forgotPassword),
        detail: { tags, summary: 'Mail a password reset token (always 202)' },
      },
    )
    .post(
      '/reset-password',
      ({ body, request, server }) => auth.resetPassword(deps, body, auditContext(request, server)),
      {
        public: true,
        ...jsonBody(AuthModel.resetPassword),
        detail: { tags, summary: 'Redeem a reset token' },
      },
    )
    .post(
      '/api-keys/regenerate',
      async ({ body, principal, status, request, server }) =>
        status(
          201,
          await regenerateKey(
            deps,
            { type: 'personal', userId: principal.user.id },
            principal,
            body?.key_id,
            auditContext(request, server),
          ),
        ),
      {
        user: true,
        ...optionalJsonBody(KeyModel.regenerate),
        detail: { tags, summary: "Regenerate the caller's personal key" },
      },
    )
