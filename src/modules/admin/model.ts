import { t } from 'elysia'
import { Email, FullName, NewPassword } from '../users/model'

export const AdminModel = {
  createUser: t.Object(
    {
      email: Email,
      full_name: FullName,
      password: t.Optional({
        ...NewPassword,
        description:
          'The first password, changed at first login; required with PASSWORD_LOGIN (the default), refused without',
      }),
    },
    { additionalProperties: false },
  ),
  updateUser: t.Object(
    {
      is_active: t.Optional(t.Boolean()),
      platform_role: t.Optional(t.Union([t.Literal('user'), t.Literal('superadmin')])),
    },
    { additionalProperties: false },
  ),
}
