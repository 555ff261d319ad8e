import { afterAll, describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { createMailer } from '../../src/lib/mailer'
import { makeTestApp, startTestServer } from '../helpers/app'
import { loginAs, makeUser, newPassword, setUserFlags, uniqueEmail } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'
import { capturedLogLines, rememberSecret } from '../helpers/secrets'
import { startSmtpServer } from '../helpers/smtp'
import { until } from '../helpers/until'

const t = makeTestApp({ RATE_LIMIT_FORGOT_PER_HOUR: '3', PUBLIC_URL: 'https://gridkeep.lab.test/' })
afterAll(() => t.close())

const forgot = (email: string) => t.req('POST', '/v1/auth/forgot-password', { body: { email } })
const reset = (token: string, new_password: string) =>
  t.req('POST', '/v1/auth/reset-password', { body: { token, new_password } })

const mailsTo = (to: string) => t.mail.sent.filter((m) => m.to === to)

/** Asks for a reset of `email`'s password and waits for the mail it sends; returns its raw token. */
async function forgotAndMail(email: string): Promise<string> {
  const before = mailsTo(email).length
  expect((await forgot(email)).status).toBe(202)
  await until(`a reset mail to ${email}`, () => mailsTo(email).length > before)
  return tokenFromMail(email)
}

/** The raw token from the last captured mail to `to`. */
function tokenFromMail(to: string): string {
  const mail = mailsTo(to).at(-1)!
  const token = /token=([\w-]+)/.exec(mail.text)![1]!
  rememberSecret(token)
  return token
}

describe('POST /v1/auth/forgot-password', () => {
  test('known and unknown emails get the same 202 answer', async () => {
    const u = await makeUser(t)
    const known = await forgot(u.email)
    const unknown = await forgot(uniqueEmail())
    expect(known.status).toBe(202)
    expect(unknown.status).toBe(202)
    expect(known.body).toEqual({ status: 'accepted' })
    expect(unknown.body).toEqual(known.body)
  })

  test('mails a link with the token under PUBLIC_URL, and stores only its hash', async () => {
    const u = await makeUser(t)
    const token = await forgotAndMail(u.email)
    const mail = mailsTo(u.email).at(-1)!
    expect(mail.text).toContain('https://gridkeep.lab.test/reset-password?token=')
    expect(token).toMatch(/^[\w-]{43}$/) // 32 random bytes, base64url
    expect(mail.text).toContain(`\n${token}\n`) // the raw token also stands alone in the mail
    const { db, tables } = rowsOf(t.deps)
    const rows = await db
      .select()
      .from(tables.passwordResetTokens)
      .where(eq(tables.passwordResetTokens.user_id, u.id))
    expect(rows).toHaveLength(1)
    expect(rows[0]!.token_hash).toMatch(/^[0-9a-f]{64}$/)
    // The database never holds the raw token, in any column of any table.
    const dump = await db.select().from(tables.passwordResetTokens)
    expect(JSON.stringify(dump)).not.toContain(token)
    expect(rows[0]!.expires_at).toBe(t.clock.now() + 3600)
  })

  test('inactive users get no mail', async () => {
    const u = await makeUser(t)
    await setUserFlags(t, u.id, { is_active: false })
    expect((await forgot(u.email)).status).toBe(202)
    // Mails leave in the order they were asked for: once an active user's reset, asked for after
    // the inactive one's, has been mailed, a mail to the inactive user would have gone before it.
    const active = await makeUser(t)
    await forgotAndMail(active.email)
    expect(mailsTo(u.email)).toEqual([])
    const { db, tables } = rowsOf(t.deps)
    const tokens = await db
      .select()
      .from(tables.passwordResetTokens)
      .where(eq(tables.passwordResetTokens.user_id, u.id))
    expect(tokens).toEqual([])
  })

  test('is rate limited per email (429, Retry-After)', async () => {
    const email = uniqueEmail()
    for (let i = 0; i < 3; i++) expect((await forgot(email)).status).toBe(202)
    const limited = await forgot(email)
    expect(limited.status).toBe(429)
    expect(limited.headers.get('retry-after')).toBeTruthy()
  })
})

describe('POST /v1/auth/reset-password', () => {
  test('redeems the token once: the new password works, older JWTs stop, the gate clears', async () => {
    const u = await makeUser(t)
    await setUserFlags(t, u.id, { must_change_password: true })
    const token = await forgotAndMail(u.email)
    const next = newPassword()
    const res = await reset(token, next)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ status: 'password_reset' })
    const login = await loginAs(t, u.email, next)
    expect((await t.req('GET', '/v1/auth/me', { token: login.token })).body.must_change_password).toBe(false)
    expect((await t.req('GET', '/v1/auth/me', { token: u.token })).status).toBe(401)
    // Single use.
    const again = await reset(token, newPassword())
    expect(again.status).toBe(400)
    expect(again.body.error).toMatchObject({ code: 'invalid_reset_token', param: 'token' })
  })

  test('an unknown token is a 400 invalid_reset_token', async () => {
    const res = await reset('A'.repeat(43), newPassword())
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('invalid_reset_token')
  })

  test('an expired token is refused; a newer request does not extend it', async () => {
    const u = await makeUser(t)
    const first = await forgotAndMail(u.email)
    t.clock.advance(3000)
    const second = await forgotAndMail(u.email)
    t.clock.advance(700) // first is 3700 s old, second 700 s
    expect((await reset(first, newPassword())).body.error.code).toBe('invalid_reset_token')
    expect((await reset(second, newPassword())).status).toBe(200)
  })

  test('a weak new password is refused and the token stays usable', async () => {
    const u = await makeUser(t)
    const token = await forgotAndMail(u.email)
    expect((await reset(token, 'short')).body.error.code).toBe('weak_password')
    expect((await reset(token, newPassword())).status).toBe(200)
  })
})

describe('mail delivery', () => {
  test('a real SMTP round trip: the mailed token resets the password', async () => {
    const smtp = await startSmtpServer({ user: 'mailer', pass: 'smtp-secret-pass' })
    rememberSecret('smtp-secret-pass')
    const server = await startTestServer({ SMTP_URL: smtp.url, MAIL_FROM: 'gridkeep <noreply@lab.test>' })
    try {
      const u = await makeUser(server)
      expect(
        (await server.req('POST', '/v1/auth/forgot-password', { body: { email: u.email } })).status,
      ).toBe(202)
      const mail = await smtp.waitForMail()
      expect(mail.to).toEqual([u.email])
      expect(mail.from).toBe('noreply@lab.test')
      expect(mail.raw).toContain('Subject: Reset your gridkeep password')
      const token = /token=([\w-]+)/.exec(mail.text)![1]!
      rememberSecret(token)
      const next = newPassword()
      const res = await server.req('POST', '/v1/auth/reset-password', { body: { token, new_password: next } })
      expect(res.status).toBe(200)
      await loginAs(server, u.email, next)
    } finally {
      await server.stop()
      await smtp.close()
    }
  })

  test('without SMTP_URL, mails land in DATA_DIR/outbox as 0600 .eml files; only to and subject are logged', async () => {
    const outboxDir = join(t.config.DATA_DIR, 'outbox')
    const mailer = createMailer({ from: 'gridkeep <noreply@localhost>', outboxDir })
    const body = `reset token ${newPassword()}`
    await mailer.send({ to: 'someone@lab.test', subject: 'Hello', text: body })
    const files = readdirSync(outboxDir)
    expect(files).toHaveLength(1)
    expect(files[0]).toEndWith('.eml')
    expect(statSync(join(outboxDir, files[0]!)).mode & 0o777).toBe(0o600)
    const eml = readFileSync(join(outboxDir, files[0]!), 'utf8')
    expect(eml).toContain('To: someone@lab.test')
    expect(eml).toContain('Subject: Hello')
    const logged = capturedLogLines()
      .filter((l) => l.includes('mail written to outbox'))
      .at(-1)!
    expect(JSON.parse(logged)).toMatchObject({ to: 'someone@lab.test', subject: 'Hello' })
    expect(logged).not.toContain(body)
  })
})
