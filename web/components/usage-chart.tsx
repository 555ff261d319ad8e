import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'
import type { UsageRow } from '../lib/types'

/**
 * Tokens per UTC day (GET /v1/usage?group_by=day): the total, and prompt (with the cached ones among
 * them) and completion beside it.
 */
export function UsageChart({ days }: { days: UsageRow[] }) {
  const host = useRef<HTMLDivElement>(null)
  const plot = useRef<uPlot | null>(null)
  const data: uPlot.AlignedData = [
    days.map((d) => d.start),
    days.map((d) => d.total_tokens),
    days.map((d) => d.prompt_tokens),
    days.map((d) => d.cached_tokens),
    days.map((d) => d.completion_tokens),
  ]

  useEffect(() => {
    const el = host.current!
    plot.current = new uPlot(
      {
        width: Math.max(320, el.clientWidth),
        height: 220,
        // Usage days are UTC days: the axis shows their dates, whatever the viewer's time zone.
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
        series: [
          {},
          { label: 'Total tokens', stroke: '#2563eb', width: 2 },
          { label: 'Prompt tokens', stroke: '#16a34a', width: 1 },
          { label: 'Cached prompt tokens', stroke: '#16a34a', width: 1, dash: [4, 4] },
          { label: 'Completion tokens', stroke: '#d97706', width: 1 },
        ],
        axes: [{}, { label: 'tokens', size: 70 }],
      },
      data,
      el,
    )
    const resize = () => plot.current?.setSize({ width: Math.max(320, el.clientWidth), height: 220 })
    addEventListener('resize', resize)
    return () => {
      removeEventListener('resize', resize)
      plot.current?.destroy()
      plot.current = null
    }
  }, [])

  useEffect(() => {
    plot.current?.setData(data)
  }, [days])

  return <div ref={host} class="chart" role="img" aria-label="Tokens per day" />
}
