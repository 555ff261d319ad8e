import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

// The daemon's state directory: who this worker is (machine_id generated once, worker_id assigned by
// the server), a digest cache for model files, and scratch space for job input and output files.
//
//   <state_dir>/worker.json   {machine_id, worker_id?, server?}  (0600)
//   <state_dir>/digests.json  sha256 cache keyed by path, valid while size and mtime match
//   <state_dir>/daemon.pid    one daemon per state directory
//   <state_dir>/jobs/<id>/    input.jsonl, output.jsonl of a running job (removed afterwards)
//   <state_dir>/engines/      a managed engine's record (<name>.json: pid, port, argv, start time),
//                             its output (<name>.log) and llama.cpp's preset (engines/child.ts,
//                             engines/llama-router.ts)
//   <state_dir>/models.json   what each loaded model was loaded for (models/manager.ts)

export interface WorkerIdentity {
  machine_id: string
  /** Assigned by the server that issued it; only reused with that same server. */
  worker_id?: string
  server?: string
}

export class StateDir {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 })
  }

  get jobsDir() {
    return join(this.dir, 'jobs')
  }

  /** Loads the identity, generating and persisting machine_id on first use. */
  identity(): WorkerIdentity {
    const stored = this.readJson<Partial<WorkerIdentity>>('worker.json') ?? {}
    if (typeof stored.machine_id === 'string' && stored.machine_id.length > 0) return stored as WorkerIdentity
    const identity: WorkerIdentity = { machine_id: crypto.randomUUID().replaceAll('-', '') }
    this.writeJson('worker.json', identity)
    return identity
  }

  saveWorkerId(workerId: string, server: string) {
    this.writeJson('worker.json', { ...this.identity(), worker_id: workerId, server })
  }

  /** A fresh scratch directory for one job. Leftovers of a crashed run are removed at start. */
  jobDir(jobId: string): string {
    const dir = join(this.jobsDir, jobId.replace(/[^\w.-]/g, '_'))
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    return dir
  }

  clearJobs() {
    rmSync(this.jobsDir, { recursive: true, force: true })
  }

  /**
   * Claims the directory for this process. Two daemons sharing one state directory would share a
   * machine_id and re-register each other's worker (which requeues its batches), so the second refuses.
   */
  lock(): () => void {
    const path = join(this.dir, 'daemon.pid')
    if (existsSync(path)) {
      const pid = Number(readFileSync(path, 'utf8').trim())
      if (pid && pid !== process.pid && alive(pid))
        throw new Error(`another daemon (pid ${pid}) uses the state directory ${this.dir}`)
    }
    writeFileSync(path, String(process.pid))
    return () => {
      try {
        if (readFileSync(path, 'utf8').trim() === String(process.pid)) rmSync(path, { force: true })
      } catch {}
    }
  }

  readJson<T>(name: string): T | undefined {
    try {
      return JSON.parse(readFileSync(join(this.dir, name), 'utf8')) as T
    } catch {
      return undefined
    }
  }

  /** Atomic replace (write + rename), owner-only. */
  writeJson(name: string, value: unknown) {
    const path = join(this.dir, name)
    const tmp = `${path}.${process.pid}.tmp`
    writeFileSync(tmp, JSON.stringify(value, null, 2), { mode: 0o600 })
    chmodSync(tmp, 0o600)
    renameSync(tmp, path)
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'
  }
}
