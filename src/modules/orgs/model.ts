import { t } from 'elysia'
import { PageQuery } from '../../lib/pagination'

export const Role = t.Union([t.Literal('owner'), t.Literal('admin'), t.Literal('viewer')])

export const OrgModel = {
  create: t.Object({ name: t.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false }),
  orgParams: t.Object({ org_id: t.String({ maxLength: 64 }) }),
  keyParams: t.Object({ org_id: t.String({ maxLength: 64 }), key_id: t.String({ maxLength: 64 }) }),
  memberParams: t.Object({ org_id: t.String({ maxLength: 64 }), user_id: t.String({ maxLength: 64 }) }),
  workerParams: t.Object({ org_id: t.String({ maxLength: 64 }), worker_id: t.String({ maxLength: 64 }) }),
  addMember: t.Object({ email: t.String({ maxLength: 320 }), role: Role }, { additionalProperties: false }),
  updateMember: t.Object({ role: Role }, { additionalProperties: false }),
  page: t.Object(PageQuery, { additionalProperties: false }),
}
