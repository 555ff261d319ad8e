import { beforeAll, describe, expect, test } from 'bun:test'
import type { JobView } from '../../src/daemon/job'
import {
  formatDuration,
  formatStatusLine,
  humanLogLine,
  RateMeter,
  startStatusView,
} from '../../src/daemon/status'
import { log, setLogLevel } from '../../src/lib/logger'
import { capturedLogLines } from '../helpers/secrets'
import { until } from '../helpers/until'

const view = (o: Partial<JobView> = {}): JobView => ({
  job_id: 'batch_abc',
  model: 'm',
  total: 1000,
  completed: 0,
  failed: 0,
  started_at_ms: 0,
  stage: null,
  ...o,
})

describe('operator view', () => {
  // What is shown is info records: the level a server started by another test file left does not count.
  beforeAll(() => setLogLevel('info'))

  test('rate and ETA come from recent progress', () => {
    const meter = new RateMeter()
    meter.sample(view(), 0)
    const r = meter.sample(view({ completed: 180, failed: 20 }), 2000)
    expect(r).toEqual({ done: 200, total: 1000, failed: 20, rps: 100, eta_seconds: 8 })
    expect(formatStatusLine(view({ completed: 180, failed: 20 }), r)).toBe(
      'batch_abc  200/1000  20 failed  100 req/s  ETA 0:08',
    )
    expect(meter.sample(view(), 0).eta_seconds).toBeNull()
  })

  test('a job waiting for its model says what it waits on instead of its counts', () => {
    const stage = 'loading qwen (unloading llama: least recently used, no job needs it)'
    const v = view({ stage })
    expect(formatStatusLine(v, new RateMeter().sample(v, 0))).toBe(`batch_abc  ${stage}`)
  })

  test('durations read as m:ss or h:mm:ss', () => {
    expect(formatDuration(5)).toBe('0:05')
    expect(formatDuration(125)).toBe('2:05')
    expect(formatDuration(3725)).toBe('1:02:05')
    expect(formatDuration(null)).toBe('--:--')
  })

  test('log records are shown readably above the status line on a terminal', () => {
    const line = JSON.stringify({
      ts: '2025-01-01T12:00:01.000Z',
      level: 'info',
      msg: 'registered',
      worker_id: 'wrk_1',
      component: 'worker',
    })
    expect(humanLogLine(line)).toBe('12:00:01 info  registered worker_id=wrk_1')
    const written: string[] = []
    const stop = startStatusView(
      { jobViews: () => [] },
      { tty: true, logEverySeconds: 10, out: { write: (s: string) => written.push(s) } },
    )
    try {
      log.info('hello from the test', { n: 1 })
    } finally {
      stop()
    }
    expect(written.join('')).toContain('info  hello from the test n=1\n')
    // The sink was restored: records go to the suite's capture again.
    log.info('after the view')
    expect(capturedLogLines().at(-1)).toContain('after the view')
  })

  test('off a terminal, progress is a structured log record', async () => {
    const before = capturedLogLines().length
    const stop = startStatusView(
      { jobViews: () => [view({ completed: 10, stage: 'loading qwen' })] },
      { tty: false, logEverySeconds: 0.02 },
    )
    const progress = () =>
      capturedLogLines()
        .slice(before)
        .map((l) => JSON.parse(l))
        .find((r) => r.msg === 'job progress')
    try {
      await until('a progress record', progress)
    } finally {
      stop()
    }
    expect(progress()).toMatchObject({
      job_id: 'batch_abc',
      done: 10,
      total: 1000,
      failed: 0,
      stage: 'loading qwen',
    })
  })
})
