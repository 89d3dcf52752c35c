// updateConfig against a real gateway and real supervisors: commit-only with
// idempotent retry, WAIT_FOR_APPLY, a change the supervisor rejects, and a
// wait deadline that leaves the operation live.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { InvalidArgumentError, OpenShellError, WaitTimeoutError } from '../index.js'
import { Harness, eventually, policyWithPort } from './harness.mjs'

let h
before(async () => {
  h = await Harness.start()
})
after(async () => {
  await h?.stop()
})

test('commit-only with an idempotency key: a retry replays the same operation', async () => {
  await h.sandbox('idem', { supervisor: true })
  const request = {
    target: { sandbox: 'idem' },
    policy: policyWithPort(8443),
    mode: 'COMMIT_ONLY',
    idempotencyKey: 'deploy-42',
  }
  const first = await h.client.updateConfig(request)
  assert.equal(first.idempotentReplay, false)
  assert.equal(first.operation.idempotencyKey, 'deploy-42')
  assert.equal(first.operation.waitTimedOut, false)
  assert.match(first.operation.id, /^op-/)

  const retry = await h.client.updateConfig(request)
  assert.equal(retry.idempotentReplay, true)
  assert.equal(retry.operation.id, first.operation.id)
  assert.equal(retry.operation.policyRevision, first.operation.policyRevision)

  // The replay wrote nothing: still exactly one revision past the initial one.
  const policy = await h.client.getSandboxPolicy('idem')
  assert.equal(policy.policy.revision, first.operation.policyRevision)

  // The same key for a different change is refused, naming the key.
  const err = await h.client
    .updateConfig({ ...request, policy: policyWithPort(8444) })
    .then(() => assert.fail('a reused key with a new request must be refused'), (e) => e)
  assert.ok(err instanceof InvalidArgumentError, String(err))
  assert.equal(err.violations[0].field, 'request_id')

  const applied = await h.client.waitForApply(first.operation.id, { timeoutMs: 30_000 })
  assert.equal(applied.state, 'APPLIED')
})

test('WAIT_FOR_APPLY resolves APPLIED with the exact policy revision', async () => {
  const sb = await h.sandbox('waits', { supervisor: true })
  const result = await h.client.updateConfig({
    target: { sandbox: 'waits' },
    policy: policyWithPort(9443),
    settings: { log_level: 'debug', log_rate_limit_per_second: 50 },
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 30_000,
  })
  const op = result.operation
  assert.equal(op.state, 'APPLIED', h.logs())
  assert.equal(op.outcome, 'APPLIED')
  assert.equal(op.waitTimedOut, false)
  assert.equal(op.targetKind, 'SANDBOX')
  assert.equal(op.target, sb.id)
  assert.equal(op.caller, 'ci')
  assert.ok(op.completedAt)

  const sandbox = await h.client.getSandbox('waits')
  assert.equal(op.policyRevision, sandbox.policyRevision)
  assert.equal(op.policyRevision, sb.sandbox.policyRevision + 1)
  assert.equal(op.settingsRevision, sandbox.settingsRevision)
  const policy = await h.client.getSandboxPolicy('waits')
  assert.equal(policy.policy.revision, op.policyRevision)
  assert.equal(policy.policy.operationId, op.id)
  assert.match(policy.policy.policyYaml, /9443/)

  const settings = await h.client.getSettings({ sandbox: 'waits' })
  const values = Object.fromEntries(settings.values.map((s) => [s.key, s.value]))
  assert.deepEqual(values, { log_level: 'debug', log_rate_limit_per_second: 50 })
})

test('a change the supervisor rejects resolves with state FAILED (not an exception)', async () => {
  await h.sandbox('rejects', {
    supervisor: true,
    onApply: 'grep -q 9999 "$OPENSHELL_POLICY_FILE" && exit 3 || exit 0',
  })
  // The initial policy passes the hook, so the sandbox runs on it first.
  const running = await eventually(
    async () => (await h.client.getSandbox('rejects')).lifecycle === 'RUNNING',
    { what: 'sandbox rejects RUNNING' },
  )
  assert.ok(running)

  const result = await h.client.updateConfig({
    target: { sandbox: 'rejects' },
    policy: policyWithPort(9999),
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 30_000,
  })
  const op = result.operation
  assert.equal(op.state, 'FAILED', h.logs())
  // The default policy_validation_failure_mode is fail_closed, as upstream OpenShell's.
  assert.equal(op.outcome, 'FAILED_CLOSED')
  assert.equal(op.waitTimedOut, false)
  assert.ok(op.error, 'a failed operation carries the supervisor error')

  // waitForApply makes the same choice: it resolves, the caller inspects state.
  const waited = await h.client.waitForApply(op.id, { timeoutMs: 30_000 })
  assert.equal(waited.state, 'FAILED')
  assert.equal(waited.id, op.id)
})

test('a wait deadline surfaces the operation id; the operation later applies', async () => {
  const sb = await h.sandbox('late')
  const result = await h.client.updateConfig({
    target: { sandbox: 'late' },
    policy: policyWithPort(7443),
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 300,
  })
  const op = result.operation
  assert.equal(op.waitTimedOut, true)
  assert.equal(op.state, 'PENDING')
  assert.match(op.id, /^op-/)

  const err = await h.client
    .waitForApply(op.id, { timeoutMs: 300 })
    .then(() => assert.fail('no supervisor is running, so the wait must time out'), (e) => e)
  assert.ok(err instanceof WaitTimeoutError, String(err))
  assert.ok(err instanceof OpenShellError)
  assert.equal(err.code, 'WAIT_TIMED_OUT')
  assert.equal(err.operationId, op.id)
  assert.equal(err.operation.id, op.id)
  assert.equal(err.operation.state, 'PENDING')

  sb.startSupervisor()
  const applied = await eventually(
    async () => {
      const now = await h.client.getOperation(op.id)
      return now.state === 'PENDING' || now.state === 'DELIVERED' ? undefined : now
    },
    { what: `operation ${op.id} to finish` },
  )
  assert.equal(applied.state, 'APPLIED', h.logs())
  assert.equal(applied.policyRevision, op.policyRevision)
})
