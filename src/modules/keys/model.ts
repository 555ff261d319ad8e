import { t } from 'elysia'
import type { ApiKeyRow } from '../../db/schema'

export const KeyName = t.String({ minLength: 1, maxLength: 100 })
export const ExpiresAt = t.Integer({ minimum: 0, maximum: 253402300799, description: 'Unix seconds' })

export const KeyModel = {
  create: t.Object(
    { name: t.Optional(KeyName), expires_at: t.Optional(t.Union([ExpiresAt, t.Null()])) },
    { additionalProperties: false },
  ),
  update: t.Object(
    {
      name: t.Optional(KeyName),
      expires_at: t.Optional(t.Union([ExpiresAt, t.Null()])),
      revoked: t.Optional(t.Literal(true)),
    },
    { additionalProperties: false },
  ),
  regenerate: t.Optional(
    t.Object({ key_id: t.Optional(t.String({ maxLength: 64 })) }, { additionalProperties: false }),
  ),
  params: t.Object({ key_id: t.String({ maxLength: 64 }) }),
}

export const KeyRecord = t.Object({
  id: t.String(),
  object: t.Literal('api_key'),
  key_type: t.Union([t.Literal('personal'), t.Literal('worker')]),
  name: t.String(),
  prefix: t.String(),
  org_id: t.Union([t.String(), t.Null()]),
  user_id: t.Union([t.String(), t.Null()]),
  created_at: t.Integer(),
  expires_at: t.Union([t.Integer(), t.Null()]),
  last_used_at: t.Union([t.Integer(), t.Null()]),
  revoked_at: t.Union([t.Integer(), t.Null()]),
  key: t.Optional(t.String({ description: 'The raw key; returned only once, on creation' })),
})
export type KeyRecord = typeof KeyRecord.static

export const toKeyRecord = (k: ApiKeyRow, raw?: string): KeyRecord => ({
  id: k.id,
  object: 'api_key',
  key_type: k.key_type,
  name: k.name,
  prefix: k.prefix,
  org_id: k.org_id,
  user_id: k.user_id,
  created_at: k.created_at,
  expires_at: k.expires_at,
  last_used_at: k.last_used_at,
  revoked_at: k.revoked_at,
  ...(raw ? { key: raw } : {}),
})
