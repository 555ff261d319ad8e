import { t } from 'elysia'
import { Email, FullName, NewPassword, Password } from '../users/model'

export const AuthModel = {
  signup: t.Object(
    { email: Email, password: NewPassword, full_name: FullName },
    { additionalProperties: false },
  ),
  login: t.Object({ email: Email, password: Password }, { additionalProperties: false }),
  changePassword: t.Object(
    { current_password: Password, new_password: NewPassword },
    { additionalProperties: false },
  ),
  forgotPassword: t.Object({ email: Email }, { additionalProperties: false }),
  resetPassword: t.Object(
    { token: t.String({ minLength: 1, maxLength: 512 }), new_password: NewPassword },
    { additionalProperties: false },
  ),
}
