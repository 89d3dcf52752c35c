// Compiled (never run) by test/types.test.mjs with `tsc --strict`: what a
// TypeScript caller writes must type-check, and each mistake at the end must
// be a type error (an unused expect-error directive fails the check).

import {
  AbortError,
  Client,
  type ConfigTarget,
  type DryRunResult,
  InvalidArgumentError,
  NotFoundError,
  type Operation,
  type OperationState,
  type UpdateResult,
  WaitTimeoutError,
} from '../../index'

export async function usage(): Promise<void> {
  const client: Client = await Client.connect({
    endpoint: 'http://127.0.0.1:7070',
    token: 'tok',
    requestTimeoutMs: 30_000,
  })
  const created = await client.createSandbox({ name: 'demo', policy: 'version: 1' })
  const credential: string = created.supervisorCredential
  const initial: Operation | undefined = created.operation

  const target: ConfigTarget = { sandbox: 'demo' }
  const result: UpdateResult = await client.updateConfig({
    target,
    policy: 'version: 1',
    settings: { log_level: 'debug', log_rate_limit_per_second: 5, workload_restart_on_exit: true },
    deleteSettings: ['environment_label'],
    mode: 'WAIT_FOR_APPLY',
    idempotencyKey: 'k',
    waitTimeoutMs: 1_000,
  })
  const state: OperationState = result.operation.state
  const applied: boolean = state === 'APPLIED' && result.operation.outcome === 'APPLIED'
  const revision: number = result.operation.policyRevision
  const timedOut: boolean = result.operation.waitTimedOut
  const fleetApplied: number | undefined = result.operation.fleet?.applied
  const replay: boolean = result.idempotentReplay
  const kept: string[] = result.keptStaticSections

  // A dry run resolves without an operation, with what would change.
  const checked: DryRunResult = await client.updateConfig({
    target,
    policy: 'version: 1',
    settings: { log_level: 'debug' },
    mode: 'COMMIT_ONLY',
    validateOnly: true,
  })
  const noOperation: undefined = checked.operation
  const added: string[] | undefined = checked.policyDiff?.addedPolicies
  const endpoints: string[] | undefined = checked.policyDiff?.changedPolicies[0]?.addedEndpoints
  const from: boolean | number | string | undefined = checked.settingChanges[0]?.oldValue
  const either = await client.updateConfig({ target, mode: 'COMMIT_ONLY', validateOnly: Math.random() > 0.5 })
  const maybe: Operation | undefined = either.operation
  void [kept, noOperation, added, endpoints, from, maybe]

  const final: Operation = await client.waitForApply(result.operation.id, {
    timeoutMs: 1_000,
    threshold: 0.95,
    signal: AbortSignal.timeout(500),
    onProgress: (op) => {
      const s: OperationState = op.state
      void s
    },
  })
  for await (const op of client.watchOperation(final.id, { timeoutMs: 1_000 })) {
    const s: OperationState = op.state
    void s
  }

  try {
    await client.getOperation('op-x')
  } catch (err) {
    if (err instanceof InvalidArgumentError) {
      const field: string = err.violations[0].field
      void field
    } else if (err instanceof WaitTimeoutError) {
      const id: string = err.operationId
      const live: OperationState = err.operation.state
      void [id, live]
    } else if (err instanceof AbortError || err instanceof NotFoundError) {
      const code: string = err.code
      void code
    }
  }

  const info = await client.gatewayInfo()
  const sessions = await client.listSessions()
  const inspection = await client.inspectSession('demo')
  const hints: string[] = inspection.hints
  const ops = await client.listOperations({ sandbox: 'demo', states: ['PENDING', 'DELIVERED'] })
  void [credential, initial, applied, revision, timedOut, fleetApplied, replay, info, sessions, hints, ops]

  // mode defaults to COMMIT_ONLY; endpoint and token to the CLI's environment variables
  const committed: UpdateResult = await client.updateConfig({ target: { global: true } })
  const fromEnvironment: Client = await Client.connect()
  void [committed, fromEnvironment]
  // @ts-expect-error the token is a string
  await Client.connect({ token: 42 })
  // @ts-expect-error a target names sandbox, workspace or global
  await client.updateConfig({ target: { cluster: 'x' }, mode: 'COMMIT_ONLY' })
  // @ts-expect-error modes are a closed set
  await client.updateConfig({ target: { global: true }, mode: 'EVENTUALLY' })
  // @ts-expect-error a dry run has no operation to read
  void checked.operation.id
  // @ts-expect-error a result that may be a dry run may have no operation
  void either.operation.id
  // @ts-expect-error states are a closed set
  const bogus: OperationState = 'DONE'
  // @ts-expect-error operations are not `any`
  const nope: number = final.state
  // @ts-expect-error use Client.connect
  new Client()
  void [bogus, nope]
}
