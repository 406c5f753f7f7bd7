// @opledger/client is the TypeScript client of opledger, the execution ledger for AI agents'
// side-effecting tool calls: Prepare an operation, have a person Approve exactly that operation,
// Execute it at most once, Get or Reconcile it; ToolRunner runs one tool call of an agent end to
// end. See docs/clients/typescript.md.

export { OpledgerClient, DEFAULT_TIMEOUT_MS } from "./client";
export type {
  ClientOptions,
  CallOptions,
  PrepareOptions,
  ExecuteOptions,
  GetOptions,
  DecisionInput,
  ListOperationsInput,
  ResolutionInput,
} from "./client";
export {
  OpledgerError,
  isOpledgerError,
  toOpledgerError,
  ERROR_DOMAIN,
  REASONS,
  decodeErrorInfo,
  decodeRetryInfo,
} from "./errors";
export type { Reason } from "./errors";
export { DEFAULT_RETRY, NO_RETRY, backoffMs, callWithRetry, retryPolicy, sleep } from "./retry";
export type { RetryPolicy } from "./retry";
export { deriveKey, keyPreimage, KEY_PREFIX } from "./keys";
export { inexactNumber } from "./numbers";
export type { KeyParts } from "./keys";
export {
  canonicalize,
  computeFingerprint,
  operationFingerprint,
  preimage,
  PREPARE_METHOD,
  FINGERPRINT_PREFIX,
} from "./fingerprint";
export type { FingerprintInput } from "./fingerprint";
export {
  ToolRunner,
  Succeeded,
  Failed,
  OutcomeUnknown,
  AwaitingApproval,
  MESSAGE_AWAITING_APPROVAL,
  MESSAGE_CHECK_UNKNOWN_OPERATION,
  CHECK_OPERATION_TOOL,
  checkOperationModelTool,
  MESSAGE_OUTCOME_UNKNOWN,
  MESSAGE_KEY_NAMES_EARLIER_CALL,
  MESSAGE_KEY_NAMES_UNDONE_CALL,
  keyNamesEarlierCall,
  stateWords,
  operationErrorReason,
} from "./runner";
export type { ToolOutcome, ToolRunnerOptions, ModelTool } from "./runner";
export {
  Edit,
  MESSAGE_EDITED,
  MESSAGE_LIMIT_EXCEEDED,
  MESSAGE_OPERATION_DUPLICATE,
  MESSAGE_POLICY_DENIED,
  MAX_POLICY_SUMMARY,
  modelDescription,
  refusalMessage,
} from "./edit";
export type { Change } from "./edit";
export { decisionMessage, decisionOf, callKey, recordedCall, toldModel } from "./adapters";
export type { LedgerDecision } from "./adapters";
// The generated messages, enums and service descriptor (from gen/ts).
export * from "./gen/opledger/v1/ledger_pb";
export { Code } from "@connectrpc/connect";
