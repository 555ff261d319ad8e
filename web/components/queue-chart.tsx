import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'
import type { QueueStats } from '../lib/types'

/** Queue depth and throughput over the last hour (GET /v1/stats/queue), one point a minute. */
export function QueueChart({ stats }: { stats: QueueStats }) {
  const host = useRef<HTMLDivElement>(null)
  const plot = useRef<uPlot | null>(null)
  const data: uPlot.AlignedData = [
    stats.points.map((p) => p.t),
    stats.points.map((p) => p.queued),
    stats.points.map((p) => p.requests_completed),
  ]

  useEffect(() => {
    const el = host.current!
    plot.current = new uPlot(
      {
        width: Math.max(320, el.clientWidth),
        height: 200,
        series: [
          {},
          { label: 'Batches waiting', stroke: '#2563eb', width: 2 },
          { label: 'Requests done / min', stroke: '#16a34a', width: 2, scale: 'rate' },
        ],
        axes: [
          {},
          { label: 'batches' },
          { side: 1, scale: 'rate', label: 'requests', grid: { show: false } },
        ],
      },
      data,
      el,
    )
    const resize = () => plot.current?.setSize({ width: Math.max(320, el.clientWidth), height: 200 })
    addEventListener('resize', resize)
    return () => {
      removeEventListener('resize', resize)
      plot.current?.destroy()
      plot.current = null
    }
  }, [])

  useEffect(() => {
    plot.current?.setData(data)
  }, [stats])

  return (
    <div ref={host} class="chart" role="img" aria-label="Queue depth and throughput over the last hour" />
  )
}
