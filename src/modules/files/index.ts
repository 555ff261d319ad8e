import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import { auditContext } from '../../http/context'
import type { CredentialState } from '../../http/credential-cache'
import { FileModel } from './model'
import * as files from './service'

const tags = ['files']

export const fileRoutes = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'routes.files', prefix: '/v1/files' })
    .use(authPlugin(deps))
    .post(
      '',
      ({ request, principal }) =>
        files.uploadFile(deps, principal, {
          contentType: request.headers.get('content-type'),
          contentLength: request.headers.get('content-length'),
          body: request.body,
        }),
      {
        user: true,
        // Streamed from request.body by the service; Elysia must not buffer it (src/http/parse.ts).
        parse: 'none',
        detail: {
          tags,
          summary: 'Upload a .jsonl batch input (multipart: file, purpose=batch)',
          requestBody: {
            required: true,
            content: { 'multipart/form-data': { schema: FileModel.upload as any } },
          },
        },
      },
    )
    .get('', ({ query, principal }) => files.listFiles(deps, principal, query), {
      user: true,
      query: FileModel.list,
      detail: { tags, summary: 'List own files, newest first' },
    })
    .get('/:file_id', ({ params, principal }) => files.getFile(deps, principal, params.file_id), {
      user: true,
      params: FileModel.params,
      detail: { tags, summary: 'File metadata (owner or superadmin)' },
    })
    .delete(
      '/:file_id',
      ({ params, principal, request, server }) =>
        files.deleteFile(deps, principal, params.file_id, auditContext(request, server)),
      {
        user: true,
        params: FileModel.params,
        detail: { tags, summary: 'Delete an own file and its bytes (not while an unfinished batch uses it)' },
      },
    )
    .get(
      '/:file_id/content',
      async ({ params, query, principal }) => {
        const { body } = await files.openContent(deps, principal, params.file_id, query)
        return new Response(body, { headers: { 'content-type': 'application/jsonl' } })
      },
      {
        reader: true,
        params: FileModel.params,
        query: FileModel.content,
        detail: {
          tags,
          summary:
            "Download the raw file (owner, superadmin, or the worker holding the batch); ?shard= serves one shard's lines, ?batch= a batch's lines in execution order",
        },
      },
    )
