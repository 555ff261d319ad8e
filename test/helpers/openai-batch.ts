// A batch run by the official `openai` SDK alone, as a user's script would, in its own process:
// `OPENAI_BASE_URL=… OPENAI_API_KEY=gk-… bun test/helpers/openai-batch.ts MODEL N`. It uploads N
// chat lines, creates the batch, polls it until it ends and reads its output file, then prints
// one JSON object: {status, completed, failed, output_lines}. Whatever the environment says about
// TLS (NODE_EXTRA_CA_CERTS) is the SDK's and the runtime's own business.

import OpenAI, { toFile } from 'openai'

const [model, n] = [process.argv[2]!, Number(process.argv[3] ?? 3)]
const openai = new OpenAI({ maxRetries: 2 })
const lines = Array.from({ length: n }, (_, i) =>
  JSON.stringify({
    custom_id: `sdk-${i}`,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 8 },
  }),
)
const file = await openai.files.create({
  file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'sdk.jsonl'),
  purpose: 'batch',
})
let batch = await openai.batches.create({
  input_file_id: file.id,
  endpoint: '/v1/chat/completions',
  completion_window: '24h',
})
const deadline = Date.now() + 60_000
while (!['completed', 'failed', 'expired', 'cancelled'].includes(batch.status) && Date.now() < deadline) {
  await Bun.sleep(50)
  batch = await openai.batches.retrieve(batch.id)
}
const output = batch.output_file_id ? await (await openai.files.content(batch.output_file_id)).text() : ''
console.log(
  JSON.stringify({
    status: batch.status,
    completed: batch.request_counts?.completed,
    failed: batch.request_counts?.failed,
    output_lines: output.split('\n').filter(Boolean).length,
  }),
)
