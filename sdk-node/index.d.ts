// Types of @openshell/sdk.
//
// Objects and enums come from native.d.ts, which napi-rs generates from the
// Rust structs on every build, so they cannot drift from what the calls
// return. This file describes the JavaScript surface of index.js and errors.js
// on top of them.

import type {
  Attachment,
  ConnectOptions,
  CreatedSandbox,
  CreateSandboxOptions,
  DeletedSandbox,
  GatewayInfo,
  ListOperationsOptions,
  ListOperationTargetsOptions,
  ListSandboxesOptions,
  LogOptions,
  Operation,
  OperationTargets,
  PolicyRevision,
  Provider,
  ProviderSpec,
  ProviderUpdate,
  ProviderWrite,
  Sandbox,
  SandboxLifecycle,
  SandboxLogLine,
  SandboxLogs,
  SandboxPolicy,
  ScopeSettings,
  SessionInspection,
  SessionSummary,
  SettingDefinition,
  UpdateConfigOptions,
  UpdateResult as NativeUpdateResult,
  WatchOptions,
} from './native'

export type {
  ApplyOutcome,
  Attachment,
  ComponentDelivery,
  ConnectOptions,
  CreatedSandbox,
  CreateSandboxOptions,
  DeletedSandbox,
  DeliveryEvent,
  DeliveryMode,
  FleetProgress,
  GatewayInfo,
  ListOperationsOptions,
  ListOperationTargetsOptions,
  ListSandboxesOptions,
  LogOptions,
  MiddlewareReadiness,
  CredentialExpiry,
  Operation,
  OperationState,
  OperationTarget,
  OperationTargets,
  PolicyChange,
  PolicyDiff,
  PolicyEdits,
  PolicyRevision,
  PolicySource,
  Provider,
  ProviderSpec,
  ProviderUpdate,
  ProviderWrite,
  RuntimeReadiness,
  Sandbox,
  SandboxLifecycle,
  SandboxLogLine,
  SandboxLogs,
  SandboxPolicy,
  ScopeSettings,
  SessionInspection,
  SessionSummary,
  Setting,
  SettingDefinition,
  SettingDiff,
  SettingScope,
  TargetKind,
  UpdateConfigOptions,
  UpdateMode,
  WatchOptions,
} from './native'

/** What a write (`updateConfig` without `validateOnly`) resolves to: always with its operation. */
export interface UpdateResult extends Omit<NativeUpdateResult, 'operation'> {
  operation: Operation
}

/**
 * What `updateConfig({ validateOnly: true })` resolves to: nothing was written, so there is
 * no operation; `policyDiff`, `settingChanges` and `keptStaticSections` say what would change.
 */
export interface DryRunResult extends Omit<NativeUpdateResult, 'operation'> {
  operation?: undefined
}

/** Where a configuration change applies. */
export type ConfigTarget = { sandbox: string } | { workspace: string } | { global: true }

/** `ProviderSpec` as Client accepts it: `expiresAt` may also be a `Date`. */
export type ProviderSpecInput = Omit<ProviderSpec, 'expiresAt'> & { expiresAt?: Date | string }
/** `ProviderUpdate` as Client accepts it: `expiresAt` may also be a `Date`. */
export type ProviderUpdateInput = Omit<ProviderUpdate, 'expiresAt'> & { expiresAt?: Date | string }

export interface WaitForApplyOptions extends WatchOptions {
  /** Called once per state change, in order; the last call sees the final operation. */
  onProgress?: (operation: Operation) => void
  /**
   * Aborting rejects the wait with an AbortError at once. The operation is
   * not cancelled: it stays pending on the gateway and resolves as usual.
   */
  signal?: AbortSignal
}

/** A connection to one OpenShell gateway. */
export declare class Client {
  private constructor()
  /**
   * Connects, failing fast (UnavailableError) when the gateway cannot be reached.
   * What `options` leaves out comes from the CLI's environment variables:
   * `OPENSHELL_GATEWAY` (else `http://127.0.0.1:7070`), `OPENSHELL_TOKEN` and
   * `OPENSHELL_CA_CERT` (the path of a PEM file).
   */
  static connect(options?: ConnectOptions): Promise<Client>
  readonly endpoint: string

  /** Creates a sandbox; `supervisorCredential` in the result is the only copy. */
  createSandbox(options: CreateSandboxOptions): Promise<CreatedSandbox>
  /** `sandbox` is an id, a name, or `WORKSPACE/NAME`. */
  getSandbox(sandbox: string): Promise<Sandbox>
  listSandboxes(options?: ListSandboxesOptions): Promise<Sandbox[]>
  /** Deletes a sandbox; its pending operations end `CANCELLED`. */
  deleteSandbox(sandbox: string): Promise<DeletedSandbox>
  /** `STOPPED` stops a sandbox, `PENDING` restarts it. */
  setSandboxLifecycle(sandbox: string, lifecycle: SandboxLifecycle): Promise<Sandbox>

  createProvider(spec: ProviderSpecInput): Promise<ProviderWrite>
  /** Replaces a provider's values; attaching sandboxes receive the new environment. */
  updateProvider(update: ProviderUpdateInput): Promise<ProviderWrite>
  deleteProvider(provider: string, workspace?: string): Promise<void>
  getProvider(provider: string, workspace?: string): Promise<Provider>
  listProviders(workspace?: string): Promise<Provider[]>
  attachProvider(sandbox: string, provider: string): Promise<Attachment>
  detachProvider(sandbox: string, provider: string): Promise<Attachment>

  /** The sandbox's latest policy revision, or `revision` when given. */
  getSandboxPolicy(sandbox: string, revision?: number): Promise<SandboxPolicy>
  /** Policy revisions, newest first, without their YAML. */
  listSandboxPolicies(sandbox: string, limit?: number): Promise<PolicyRevision[]>
  /**
   * The global policy's latest revision, or `revision` when given; a revision that
   * cleared it has no `policyYaml` and an empty hash.
   */
  getGlobalPolicy(revision?: number): Promise<SandboxPolicy>
  /** The global policy's revisions, newest first, without their YAML. */
  listGlobalPolicies(limit?: number): Promise<PolicyRevision[]>
  getSettings(target: ConfigTarget): Promise<ScopeSettings>
  listSettingDefinitions(): Promise<SettingDefinition[]>

  /**
   * Writes policy and/or settings as one durable operation.
   *
   * `COMMIT_ONLY` resolves right after commit. `WAIT_FOR_APPLY` resolves once
   * the operation is terminal, or when `waitTimeoutMs` passes: then the
   * operation comes back still live with `waitTimedOut: true` (not an error).
   * A change the supervisor rejected resolves too, with state `FAILED`.
   * `keptStaticSections` names the static sections a sandbox policy omitted
   * and that the sandbox keeps from its current policy.
   *
   * With `validateOnly: true` nothing is written: the gateway runs every check
   * of the write against what is stored and resolves with what would change
   * (a DryRunResult, without an operation).
   *
   * `policyEdits` (a sandbox target only, instead of `policy`) edits the
   * sandbox's latest policy on the gateway in the CLI's forms; `mergeNotes`
   * says what the merge did differently from the literal request. With
   * `expectedRevision` a target whose policy revision has moved on rejects
   * with FailedPreconditionError and nothing is written.
   */
  updateConfig(options: UpdateConfigOptions & { validateOnly: true }): Promise<DryRunResult>
  updateConfig(options: UpdateConfigOptions & { validateOnly?: false }): Promise<UpdateResult>
  updateConfig(options: UpdateConfigOptions): Promise<UpdateResult | DryRunResult>
  /** Rejects with NotFoundError for an unknown id. */
  getOperation(id: string): Promise<Operation>
  /** Newest first; one page. */
  listOperations(options?: ListOperationsOptions): Promise<Operation[]>
  /**
   * One page of an operation's targets, in sandbox id order: each sandbox,
   * its state and why (`reason`). Pass `nextPageToken` back as `pageToken`
   * for the next page. Rejects with NotFoundError for an unknown id.
   */
  listOperationTargets(id: string, options?: ListOperationTargetsOptions): Promise<OperationTargets>
  /** Follows an operation's state changes; see OperationWatch. */
  watchOperation(id: string, options?: WatchOptions): OperationWatch
  /**
   * Resolves to the final operation (a `FAILED` one included: inspect
   * `.state`). Rejects with WaitTimeoutError if the deadline passes while the
   * operation is live, and with AbortError when `signal` aborts.
   */
  waitForApply(id: string, options?: WaitForApplyOptions): Promise<Operation>

  listSessions(): Promise<SessionSummary[]>
  /** Explains configuration delivery for one sandbox, with hints. */
  inspectSession(sandbox: string): Promise<SessionInspection>
  gatewayInfo(): Promise<GatewayInfo>
  /** A sandbox's recent log lines (provider values masked), oldest first, with drop counts. */
  getSandboxLogs(sandbox: string, options?: LogOptions): Promise<SandboxLogs>
  /** Follows a sandbox's log lines; see SandboxLogWatch. */
  watchSandboxLogs(sandbox: string, options?: LogOptions): SandboxLogWatch
}

/** One item of a followed sandbox's logs. */
export type SandboxLogEvent =
  | { kind: 'line'; line: SandboxLogLine }
  | { kind: 'dropped'; droppedLines: number; message: string }

/**
 * A followed sandbox's log lines: the recent ones, then new ones as they
 * arrive. It does not end by itself while the sandbox lives; `break` out of
 * `for await`, or call `cancel()`.
 */
export declare class SandboxLogWatch implements AsyncIterableIterator<SandboxLogEvent> {
  private constructor()
  readonly sandbox: string
  next(): Promise<IteratorResult<SandboxLogEvent, undefined>>
  return(value?: undefined): Promise<IteratorResult<SandboxLogEvent, undefined>>
  cancel(): void
  [Symbol.asyncIterator](): SandboxLogWatch
}

/**
 * A running wait on one operation. Each value is the operation after a state
 * change; iteration ends after the terminal one (its `return` value is the
 * final operation), or throws WaitTimeoutError if the deadline passes first.
 */
export declare class OperationWatch implements AsyncIterableIterator<Operation> {
  private constructor()
  readonly operationId: string
  next(): Promise<IteratorResult<Operation, Operation | undefined>>
  /** Stops the wait (not the operation); `for await … break` calls it. */
  return(value?: Operation): Promise<IteratorResult<Operation, Operation | undefined>>
  cancel(): void
  [Symbol.asyncIterator](): OperationWatch
}

export interface FieldViolation {
  /** Field path, e.g. `network_policies.github.endpoints[0].port`; empty for the whole document. */
  field: string
  message: string
}

/** Base class of every error the SDK rejects with. */
export declare class OpenShellError extends Error {
  /** Also true for the TypeErrors of refused argument types (see InvalidArgumentError). */
  static [Symbol.hasInstance](value: unknown): boolean
  /**
   * Stable code: 'INVALID_ARGUMENT', 'NOT_FOUND', 'ALREADY_EXISTS',
   * 'FAILED_PRECONDITION', 'UNAUTHENTICATED', 'UNAVAILABLE',
   * 'DEADLINE_EXCEEDED', 'WAIT_TIMED_OUT', 'TRANSPORT', 'ABORTED', or another
   * gRPC code name such as 'INTERNAL'.
   */
  readonly code: string
  constructor(message: string, options?: { code?: string; cause?: unknown })
}

/**
 * Bad input. An argument of the wrong type is refused before anything is sent
 * with a `TypeError` that names it (`waitTimeoutMs must be a number of
 * milliseconds`); that TypeError also has `code` 'INVALID_ARGUMENT' and
 * `violations`, and is `instanceof InvalidArgumentError`.
 */
export declare class InvalidArgumentError extends OpenShellError {
  readonly code: 'INVALID_ARGUMENT'
  readonly violations: FieldViolation[]
  constructor(message: string, options?: { violations?: FieldViolation[]; cause?: unknown })
}

export declare class NotFoundError extends OpenShellError {
  readonly code: 'NOT_FOUND'
}

export declare class AlreadyExistsError extends OpenShellError {
  readonly code: 'ALREADY_EXISTS'
}

export declare class FailedPreconditionError extends OpenShellError {
  readonly code: 'FAILED_PRECONDITION'
}

export declare class UnauthenticatedError extends OpenShellError {
  readonly code: 'UNAUTHENTICATED'
}

export declare class UnavailableError extends OpenShellError {
  readonly code: 'UNAVAILABLE'
}

/** The wait deadline passed while the operation was still live; it keeps going. */
export declare class WaitTimeoutError extends OpenShellError {
  readonly code: 'WAIT_TIMED_OUT'
  /** The operation as last seen, still live. */
  readonly operation: Operation
  readonly operationId: string
  constructor(operation: Operation, options?: { cause?: unknown })
}

/** The caller's AbortSignal ended a wait; the operation is unaffected. */
export declare class AbortError extends OpenShellError {
  readonly code: 'ABORTED'
  readonly operationId: string
  /** `reason` becomes `cause`: the signal's abort reason. */
  constructor(operationId: string, reason?: unknown)
}
