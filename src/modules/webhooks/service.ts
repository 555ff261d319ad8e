import { randomBytes } from 'node:crypto'
import { WEBHOOK_EVENT_TYPES } from '../../db/schema'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import { badRequest, notFound } from '../../lib/errors'
import { newId } from '../../lib/ids'
import { log } from '../../lib/logger'
import { type PageParams, toPage } from '../../lib/pagination'
import { toDeliveryRecord, toWebhookRecord, type WebhookModel, type WebhookRecord } from './model'
import { parseWebhookUrl, resolveTarget } from './urls'

// Webhooks (docs/api.md §13): a user's endpoints for their own batches' events. The secret is made
// here, returned once by create, and kept as is (delivery signs with it); no later response or
// log line carries it.

/** whsec_ + base64 of 24 random bytes (Standard Webhooks' secret form). */
const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`

export async function createWebhook(
  deps: Deps,
  by: UserPrincipal,
  body: typeof WebhookModel.create.static,
): Promise<WebhookRecord> {
  const url = parseWebhookUrl(body.url)
  if (!deps.config.WEBHOOK_ALLOW_PRIVATE) {
    const target = await resolveTarget(url, deps.resolveHost, false)
    if (!target.ok) throw badRequest('invalid_url', `Invalid webhook url: ${target.reason}`, 'url')
  }
  const secret = newSecret()
  const row = await deps.store.webhooks.createWebhook({
    id: newId('wh_'),
    user_id: by.user.id,
    url: url.href,
    secret,
    events: body.events ?? [...WEBHOOK_EVENT_TYPES],
    created_at: deps.clock.now(),
  })
  log.info('webhook created', { webhook_id: row.id, user_id: by.user.id, events: row.events })
  return { ...toWebhookRecord(row), secret }
}

export async function listWebhooks(deps: Deps, by: UserPrincipal, query: PageParams) {
  const page = await deps.store.webhooks.listWebhooks(by.user.id, query)
  return toPage(page.rows.map(toWebhookRecord), page.has_more)
}

async function ownWebhook(deps: Deps, by: UserPrincipal, id: string) {
  const row = await deps.store.webhooks.findWebhook(by.user.id, id)
  if (!row) throw notFound('webhook_not_found', `No webhook ${id}`, 'webhook_id')
  return row
}

export async function getWebhook(deps: Deps, by: UserPrincipal, id: string) {
  return toWebhookRecord(await ownWebhook(deps, by, id))
}

export async function deleteWebhook(deps: Deps, by: UserPrincipal, id: string) {
  if (!(await deps.store.webhooks.deleteWebhook(by.user.id, id)))
    throw notFound('webhook_not_found', `No webhook ${id}`, 'webhook_id')
  log.info('webhook deleted', { webhook_id: id, user_id: by.user.id })
  return { id, object: 'webhook' as const, deleted: true as const }
}

export async function listDeliveries(deps: Deps, by: UserPrincipal, id: string, query: PageParams) {
  const hook = await ownWebhook(deps, by, id)
  const page = await deps.store.webhooks.listAttempts(hook.id, query)
  return toPage(page.rows.map(toDeliveryRecord), page.has_more)
}
