import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { gpuState, type Holder, liveHolders } from './fake-nvidia-smi'

// A simulated GPU box for the daemon's tests and benchmarks: GPUs in a ledger directory, an
// `nvidia-smi` that reads it (bin/nvidia-smi, to put first on the daemon's PATH), and the launch
// command of a stand-in `vllm serve` (test/helpers/fake-vllm.ts) that applies vLLM's memory rules
// against it (or SGLang's, launched as SGLang is). What the driver would say — each GPU's used and
// free memory, which process holds what — is read back from the same ledger, and every engine start
// the engine would refuse for memory is counted (refused()).

const REPO = resolve(import.meta.dir, '../..')
const FAKE_VLLM = join(REPO, 'test/helpers/fake-vllm.ts')
const FAKE_SMI = join(REPO, 'test/helpers/fake-nvidia-smi.ts')

export interface GpuBox {
  dir: string
  /** The directory holding `nvidia-smi`: first on the daemon's PATH. */
  bin: string
  /** PATH with the box's nvidia-smi first. */
  path: string
  /** Each GPU's memory now, GB (MiB ÷ 1024). */
  memory(): { index: number; used_gb: number; free_gb: number; total_gb: number }[]
  /** The processes holding GPU memory now (the engine cores), with their model and GPUs. */
  holders(): (Holder & { model?: string })[]
  /** Every engine core that ever held memory for `model`, oldest first (alive or not). */
  cores(model: string): Holder[]
  /** The engine starts refused for memory so far. */
  refused(): { model: string; gpus: number[]; error: string }[]
  /**
   * The launch command (`--launch-command`) of the stand-in vLLM on this box: its variables through
   * `env` (the box, the control directory, how long a load and a request take), then `serve`.
   */
  launchCommand(o?: {
    control?: string
    loadMs?: number
    requestMs?: number
    /** The stand-in applies SGLang's memory rule, launched as SGLang is (default vllm). */
    engine?: 'vllm' | 'sglang'
  }): string
}

/**
 * A box of `gpus` (GB each) in `dir`. `weights`: each model's weights (GB, by served name), which
 * its stand-in engine must fit in its fraction of the GPUs (the catalogue's vram_gb; a model left
 * out is not checked).
 */
export function makeGpuBox(dir: string, gpus: number[], weights: Record<string, number> = {}): GpuBox {
  mkdirSync(join(dir, 'held'), { recursive: true })
  mkdirSync(join(dir, 'bin'), { recursive: true })
  writeFileSync(
    join(dir, 'box.json'),
    JSON.stringify({
      gpus: gpus.map((gb, index) => ({
        index,
        uuid: `GPU-00000000-0000-4000-8000-${String(index).padStart(12, '0')}`,
        name: 'NVIDIA Simulated 24GB',
        total_mib: gb * 1024,
      })),
      weights_gb: weights,
    }),
  )
  const smi = join(dir, 'bin', 'nvidia-smi')
  writeFileSync(smi, `#!/bin/sh\nexec '${process.execPath}' '${FAKE_SMI}' '${dir}' "$@"\n`)
  chmodSync(smi, 0o755)
  const gb = (mib: number) => Math.round((mib / 1024) * 100) / 100
  return {
    dir,
    bin: join(dir, 'bin'),
    path: `${join(dir, 'bin')}:${process.env.PATH ?? ''}`,
    memory: () =>
      gpuState(dir).map((g) => ({
        index: g.index,
        used_gb: gb(g.used_mib),
        free_gb: gb(g.free_mib),
        total_gb: gb(g.total_mib),
      })),
    holders: () => liveHolders(dir),
    cores: (model) =>
      readdirSync(join(dir, 'held'))
        .filter((f) => f.endsWith('.json'))
        .map((f) => JSON.parse(readFileSync(join(dir, 'held', f), 'utf8')) as Holder & { at_ms: number })
        .filter((h) => h.model === model)
        .sort((a, b) => a.at_ms - b.at_ms),
    refused: () => {
      const path = join(dir, 'refused.jsonl')
      if (!existsSync(path)) return []
      return readFileSync(path, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    },
    launchCommand: (o = {}) =>
      [
        'env',
        `GPUBOX_DIR=${dir}`,
        ...(o.control ? [`FAKE_VLLM_CONTROL=${o.control}`] : []),
        `FAKE_VLLM_LOAD_MS=${o.loadMs ?? 50}`,
        `FAKE_VLLM_REQUEST_MS=${o.requestMs ?? 0}`,
        process.execPath,
        FAKE_VLLM,
        o.engine === 'sglang'
          ? 'sglang --model-path {model_path} --served-model-name {model} --host 127.0.0.1 --port {port} --enable-cache-report {params}'
          : 'serve {model_path} --served-model-name {model} --host 127.0.0.1 --port {port} --enable-prompt-tokens-details {params}',
      ].join(' '),
  }
}
