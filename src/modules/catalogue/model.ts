import type { TSchema } from '@sinclair/typebox'
import { t } from 'elysia'
import type { CatalogEntryRow } from '../../db/schema'
import { MAX_ID_LENGTH } from './manifest'

const nullable = <S extends TSchema>(s: S) => t.Union([s, t.Null()])

// The model object of docs/api.md §4, exactly these fields.
export const ModelObject = t.Object({
  id: t.String(),
  object: t.Literal('model'),
  display_name: t.String(),
  task_type: t.Union([
    t.Literal('chat'),
    t.Literal('text-generation'),
    t.Literal('embedding'),
    t.Literal('vision'),
    t.Null(),
  ]),
  quantization: nullable(t.String()),
  parameter_size: nullable(t.String()),
  context_length: nullable(t.Integer()),
  vram_gb: nullable(t.Number()),
  size_gb: nullable(t.Number()),
  capabilities: t.Record(t.String(), t.Boolean()),
  lineage: nullable(t.String()),
  status: t.Union([
    t.Literal('active'),
    t.Literal('requested'),
    t.Literal('deprecated'),
    t.Literal('unverified'),
  ]),
  source_type: nullable(t.String()),
  source_ref: nullable(t.String()),
  source_revision: nullable(t.String()),
  homepage_url: nullable(t.String()),
  digest: nullable(t.String()),
  created: t.Integer(),
  owned_by: t.String({ description: '`gridkeep` for public entries, else the owning org id' }),
  available: t.Boolean({ description: 'Some online worker can serve it now (the predicate poll uses)' }),
})
export type ModelObject = typeof ModelObject.static

export const ModelList = t.Object({ object: t.Literal('list'), data: t.Array(ModelObject) })

export const ModelParams = t.Object({ id: t.String({ minLength: 1, maxLength: MAX_ID_LENGTH }) })

export const toModelObject = (row: CatalogEntryRow, available: boolean): ModelObject => ({
  id: row.id,
  object: 'model',
  display_name: row.display_name,
  task_type: row.task_type,
  quantization: row.quantization,
  parameter_size: row.parameter_size,
  context_length: row.context_length,
  vram_gb: row.vram_gb,
  size_gb: row.size_gb,
  capabilities: row.capabilities,
  lineage: row.lineage,
  status: row.status,
  source_type: row.source_type,
  source_ref: row.source_ref,
  source_revision: row.source_revision,
  homepage_url: row.homepage_url,
  digest: row.digest,
  created: row.created_at,
  owned_by: row.org_id ?? 'gridkeep',
  available,
})
