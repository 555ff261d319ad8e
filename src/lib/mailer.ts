import { chmodSync, mkdirSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import nodemailer from 'nodemailer'
import { newId } from './ids'
import { log } from './logger'

export interface Mail {
  to: string
  subject: string
  text: string
}

export interface Mailer {
  send(mail: Mail): Promise<void>
  close(): void
}

/**
 * SMTP through nodemailer when SMTP_URL is set; otherwise each mail is written as an .eml file
 * (mode 0600) to DATA_DIR/outbox so a lab without a mail server can still reset passwords.
 * Only the recipient and subject are logged, never the body (it carries the reset token).
 */
export function createMailer(opts: { smtpUrl?: string; from: string; outboxDir: string }): Mailer {
  if (opts.smtpUrl) {
    const transport = nodemailer.createTransport(opts.smtpUrl)
    return {
      async send(mail) {
        await transport.sendMail({ from: opts.from, ...mail })
        log.info('mail sent', { to: mail.to, subject: mail.subject, via: 'smtp' })
      },
      close: () => transport.close(),
    }
  }
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' })
  return {
    async send(mail) {
      const info = await transport.sendMail({ from: opts.from, ...mail })
      mkdirSync(opts.outboxDir, { recursive: true, mode: 0o700 })
      const name = `${Date.now()}-${newId('req_').slice(4)}.eml`
      const path = join(opts.outboxDir, name)
      // Whole or not at all: a reader (a person, a script watching the outbox) never sees a mail
      // half written. The temporary name starts with a dot and does not end in .eml.
      const tmp = join(opts.outboxDir, `.${name}.tmp`)
      writeFileSync(tmp, info.message as Buffer, { mode: 0o600 })
      chmodSync(tmp, 0o600)
      renameSync(tmp, path)
      log.info('mail written to outbox', { to: mail.to, subject: mail.subject, file: path })
    },
    close() {},
  }
}
