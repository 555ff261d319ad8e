// The worker agent's life cycle as data (River's start/stop services: one state, moves checked
// against a table, each with a comment saying who makes it). Agent.enter() is the only mover.
//
//   created   ← new Agent()  (a shutdown() before run() goes straight to stopping)
//   starting  ← run(): state directory locked, runtime prepared, registering (retried)
//   running   ← registered: heartbeats on their own loop; the poll loop claims while capacity is free
//   draining  ← shutdown() (SIGTERM): no more polls; running jobs get --shutdown-grace to finish
//   stopping  ← the grace is over, the last job ended, shutdown(true), or the server refused the key:
//               jobs still running are stopped and reported failed (their batches are requeued)
//   stopped   ← every job has ended; the heartbeat loop ends and run() resolves

export const AGENT_STATES = ['created', 'starting', 'running', 'draining', 'stopping', 'stopped'] as const
export type AgentState = (typeof AGENT_STATES)[number]

export const AGENT_MOVES: Record<AgentState, readonly AgentState[]> = {
  // shutdown() before run(): straight to stopping, then stopped.
  created: ['starting', 'stopping'],
  starting: ['running', 'stopping'],
  running: ['draining', 'stopping'],
  draining: ['stopping'],
  stopping: ['stopped'],
  stopped: [],
}

export class IllegalAgentMove extends Error {
  constructor(
    readonly from: AgentState,
    readonly to: AgentState,
  ) {
    super(`illegal agent state change ${from} → ${to}`)
  }
}

export function checkMove(from: AgentState, to: AgentState) {
  if (!AGENT_MOVES[from].includes(to)) throw new IllegalAgentMove(from, to)
}
