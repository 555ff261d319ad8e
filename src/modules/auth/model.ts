import { t } from 'elysia'
import { Email, FullName, Password } from '../users/model'

export const AuthModel = {
  signup: t.Object(
    { email: Email, password: Password, full_name: FullName },
    { additionalProperties: false },
  ),
  login: t.Object({ email: Email, password: Password }, { additionalProperties: false }),
  changePassword: t.Object(
    { current_password: Password, new_password: Password },
    { additionalProperties: false },
  ),
  forgotPassword: t.Object({ email: Email }, { additionalProperties: false }),
  resetPassword: t.Object(
    { token: t.String({ minLength: 1, maxLength: 512 }), new_password: Password },
    { additionalProperties: false },
  ),
}
