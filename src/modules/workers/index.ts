import { Elysia } from 'elysia'
import type { Deps } from '../../deps'
import { authPlugin } from '../../http/auth'
import type { CredentialState } from '../../http/credential-cache'
import { jsonBody } from '../../http/parse'
import { WorkerBodies } from '../../protocol/worker'
import type { CatalogueState } from '../catalogue/view'
import { pollForJob } from './poll-wait'
import { uploadResults } from './results'
import * as workers from './service'
import type { PollState } from './waiters'

// The daemon protocol (docs/api.md §7 Workers, docs/api.md §7): worker key only, no /v1 prefix (docs/api.md §0).

const tags = ['workers']

export const workerRoutes = (deps: Deps & CatalogueState & CredentialState & PollState) =>
  new Elysia({ name: 'routes.workers', prefix: '/workers' })
    .use(authPlugin(deps))
    .post('/register', ({ principal, body }) => workers.register(deps, principal, body), {
      worker: true,
      ...jsonBody(WorkerBodies.register),
      detail: { tags, summary: 'Register or re-register a worker; the org comes from the key' },
    })
    .post(
      '/:worker_id/heartbeat',
      ({ principal, params, body }) => workers.heartbeat(deps, principal, params.worker_id, body),
      {
        worker: true,
        params: WorkerBodies.params,
        ...jsonBody(WorkerBodies.heartbeat),
        detail: {
          tags,
          summary:
            'Liveness, activity, VRAM, the on-disk inventory, loading models and measured load times and rates',
        },
      },
    )
    .post(
      '/poll',
      ({ principal, body, request }) =>
        pollForJob(deps, principal, body.worker_id, body.wait_seconds, request.signal, {
          spare: body.spare_gpu === true,
          loaded: body.loaded_models ?? null,
          inUse: body.models_in_use ?? null,
          failed: body.failed_models ?? [],
        }),
      {
        worker: true,
        ...jsonBody(WorkerBodies.poll),
        detail: {
          tags,
          summary:
            'Claim the best-matching validated batch, or {job: null} (with pull_models: downloads asked of an idle worker); wait_seconds holds the poll',
        },
      },
    )
    .post('/progress', ({ principal, body }) => workers.progress(deps, principal, body), {
      worker: true,
      ...jsonBody(WorkerBodies.progress),
      detail: { tags, summary: 'Live request counts of a held batch' },
    })
    .post('/model-progress', ({ principal, body }) => workers.modelProgress(deps, principal, body), {
      worker: true,
      ...jsonBody(WorkerBodies.modelProgress),
      detail: {
        tags,
        summary:
          'Model download progress: kept on the ask (the worker row shows it), logged; counts as liveness',
      },
    })
    .post('/upload-results', ({ principal, request }) => uploadResults(deps, principal, request), {
      worker: true,
      // Streamed from request.body (src/modules/workers/results.ts); never buffered by Elysia.
      parse: 'none',
      detail: {
        tags,
        summary:
          'Upload the output JSONL (multipart: job_id, worker_id, assignment_id?, completed?, failed?, file)',
      },
    })
    .post('/report-failure', ({ principal, body }) => workers.reportFailure(deps, principal, body), {
      worker: true,
      ...jsonBody(WorkerBodies.reportFailure),
      detail: { tags, summary: 'Report a failed run; the batch is requeued or, on the last attempt, failed' },
    })
