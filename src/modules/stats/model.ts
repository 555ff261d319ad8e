import { t } from 'elysia'

const point = t.Object({
  t: t.Integer({ description: 'End of the minute (Unix seconds)' }),
  queued: t.Integer({ description: 'Batches waiting for a worker (validating or validated) at t' }),
  requests_completed: t.Integer({
    description: 'Requests of batches completed during the minute ending at t',
  }),
})

export const StatsModel = {
  queue: t.Object({
    object: t.Literal('queue.stats'),
    as_of: t.Integer(),
    step_seconds: t.Integer(),
    validating: t.Integer(),
    validated: t.Integer(),
    in_progress: t.Integer(),
    points: t.Array(point),
  }),
}
