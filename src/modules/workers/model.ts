// The /workers bodies are defined once, in src/protocol/worker.ts (docs/api.md §7); the routes import
// them from there. These type names remain only for service.ts, which another change is reworking:
// delete this file once service.ts imports src/protocol/worker.ts itself.
export type {
  HeartbeatBody,
  InventoryItem,
  ModelProgressBody,
  ProgressBody,
  RegisterBody,
  ReportFailureBody,
} from '../../protocol/worker'
