import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { withRequestId } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { AuditEventList, AuditModel } from './model'
import * as audit from './service'

const tags = ['audit']

// docs/api.md §17: the audit log's one endpoint, read only (no route changes or deletes an entry).
export const auditRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.audit', prefix: '/v1/audit-events' }).use(authPlugin(deps)).get(
    '',
    // Both answers are built whole here: the list as JSON (the schema below documents it), the
    // export as a stream of JSON lines.
    async ({ principal, query, request }) => {
      if (!audit.wantsJsonl(query.format, request.headers.get('accept')))
        return new Response(JSON.stringify(await audit.listAuditEvents(deps, principal, query)), {
          headers: withRequestId(request, { 'content-type': 'application/json' }),
        })
      return new Response(await audit.exportAuditEvents(deps, principal, query), {
        headers: withRequestId(request, { 'content-type': 'application/x-ndjson' }),
      })
    },
    {
      user: true,
      query: AuditModel.query,
      response: { 200: AuditEventList },
      detail: {
        tags,
        summary:
          'Audit log entries, newest first: every entry for a superadmin, the entries of the ' +
          'organizations one owns or administers for anyone else; filtered, paged, or streamed as JSON lines',
      },
    },
  )
