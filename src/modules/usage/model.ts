import { t } from 'elysia'

// docs/api.md §14 usage. Times are taken as strings and parsed by the service, so that a bad value is
// a 400 naming its parameter (Elysia's coerced integers lose the name when they fail a bound).

const time = (what: string) =>
  t.Optional(t.String({ maxLength: 32, description: `${what} (Unix seconds, an integer)` }))

const query = (groups: string) =>
  t.Object(
    {
      start: time('Start of the range, inclusive; default: 30 days before `end`'),
      end: time('End of the range, exclusive; default: the end of the current UTC day'),
      group_by: t.Optional(t.String({ maxLength: 16, description: `${groups} (default day)` })),
    },
    { additionalProperties: false },
  )

const count = (description: string) => t.Integer({ description })
// A runtime may report fractional counts; they are summed as given.
const tokens = (description: string) => t.Number({ description })

/** One row of a usage list: a UTC day, a model, a key or a user within the range. */
const bucket = t.Object({
  start: t.Integer({ description: 'Start of what the row covers (Unix seconds, inclusive)' }),
  end: t.Integer({ description: 'End of what the row covers (Unix seconds, exclusive)' }),
  model: t.Optional(t.Union([t.String(), t.Null()])),
  key_prefix: t.Optional(
    t.String({ description: 'The creating key’s prefix; "dashboard" for batches created with a JWT' }),
  ),
  key_id: t.Optional(t.Union([t.String(), t.Null()])),
  key_name: t.Optional(t.Union([t.String(), t.Null()])),
  user_id: t.Optional(t.String()),
  email: t.Optional(t.Union([t.String(), t.Null()])),
  batches: count('Completed batches'),
  requests: count('Completed requests of those batches'),
  prompt_tokens: tokens('Sum of the output lines’ usage.prompt_tokens'),
  cached_tokens: tokens(
    'Of those, the prompt tokens served from the engine’s cache: the sum of usage.prompt_tokens_details.cached_tokens (0 where the engine reports none)',
  ),
  completion_tokens: tokens('Sum of the output lines’ usage.completion_tokens'),
  total_tokens: tokens('Sum of the output lines’ usage.total_tokens'),
})

export const UsageModel = {
  query: query('day, model or key'),
  orgQuery: query('day or model'),
  adminQuery: query('day, model, key or user'),
  list: t.Object({ object: t.Literal('list'), data: t.Array(bucket) }),
}

export type UsageQuery = typeof UsageModel.query.static
export type UsageBucket = typeof bucket.static
export type UsageList = typeof UsageModel.list.static
