// Pollers in their own thread, so the server's event loop only serves: each POSTs /workers/poll
// until it gets {job: null}. Message in: { url, pollers: {headers, body}[] }.
// Message out: { jobIds, seconds } (every job_id claimed, repeats included: a double claim shows
// twice; the time from the first poll to the last answer).

declare const self: Worker

interface Drain {
  url: string
  pollers: { headers: Record<string, string>; body: string }[]
}

self.onmessage = async (event: MessageEvent<Drain>) => {
  const { url, pollers } = event.data
  const jobIds: string[] = []
  const t0 = performance.now()
  await Promise.all(
    pollers.map(async ({ headers, body }) => {
      for (;;) {
        const res = await fetch(url, { method: 'POST', headers, body })
        if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`)
        const { job } = (await res.json()) as { job: { job_id: string } | null }
        if (!job) return
        jobIds.push(job.job_id)
      }
    }),
  )
  postMessage({ jobIds, seconds: (performance.now() - t0) / 1000 })
}
