import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { holdLock, LockHeld } from './flock'

// The daemon's state directory: who this worker is (machine_id generated once, worker_id assigned by
// the server), a digest cache for model files, and scratch space for job input and output files.
//
//   <state_dir>/worker.json   {machine_id, worker_id?, server?}  (0600)
//   <state_dir>/digests.json  sha256 cache keyed by path, valid while size and mtime match
//   <state_dir>/daemon.lock   one daemon per state directory: flock(2)ed for the daemon's life,
//                             holding its pid and start time (flock.ts)
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
   * Claims the directory for this process (docs/worker.md "One daemon per state directory"). Two
   * daemons sharing one state directory would share a machine_id and re-register each other's
   * worker (which requeues its batches), so the second refuses, naming the first. The lock is the
   * kernel's: it ends with the process that held it, so a crash or a reboot leaves nothing to clear.
   */
  lock(): () => void {
    let release: () => void
    try {
      release = holdLock(join(this.dir, 'daemon.lock'), {
        pid: process.pid,
        started_at: new Date().toISOString(),
      })
    } catch (e) {
      if (!(e instanceof LockHeld)) throw e
      const { pid, started_at } = e.holder ?? {}
      const who =
        typeof pid === 'number'
          ? ` (pid ${pid}${typeof started_at === 'string' ? `, started ${started_at}` : ''})`
          : ''
      throw new Error(
        `another daemon${who} uses the state directory ${this.dir}: stop it, or give this one its own --state-dir`,
      )
    }
    // The pid file of daemons before the lock: a pid there may be anyone's now.
    rmSync(join(this.dir, 'daemon.pid'), { force: true })
    return release
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
