// The rest of the Client surface against a real gateway: sandboxes, fleet
// writes, providers, policies, sessions and operations lists.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { Harness, eventually, policyWithPort } from './harness.mjs'

let h
let alpha
let beta
before(async () => {
  h = await Harness.start()
  alpha = await h.sandbox('alpha', { supervisor: true })
  beta = await h.sandbox('beta', { supervisor: true })
  for (const name of ['alpha', 'beta']) {
    await eventually(async () => (await h.client.getSandbox(name)).lifecycle === 'RUNNING', {
      what: `${name} RUNNING`,
    })
  }
})
after(async () => {
  await h?.stop()
})

test('gatewayInfo describes the gateway', async () => {
  const info = await h.client.gatewayInfo()
  assert.equal(info.configDeliveryMode, 'push')
  assert.equal(info.storeBackend, 'sqlite')
  assert.ok(info.protocolRevision >= 1)
  assert.deepEqual(info.replicas, [info.replicaId])
  assert.equal(h.client.endpoint, h.endpoint)
})

test('sandboxes resolve by name, id and WORKSPACE/NAME', async () => {
  const byName = await h.client.getSandbox('alpha')
  assert.equal(byName.id, alpha.id)
  assert.equal(byName.workspace, 'default')
  assert.equal((await h.client.getSandbox(alpha.id)).name, 'alpha')
  assert.equal((await h.client.getSandbox('default/alpha')).id, alpha.id)
  const names = (await h.client.listSandboxes()).map((s) => s.name).sort()
  assert.deepEqual(names, ['alpha', 'beta'])
  assert.equal(alpha.sandbox.lifecycle, 'PENDING')
  assert.equal(alpha.initialOperation.policyRevision, 1)
})

test('a global settings write is a fleet operation with per-target counts', async () => {
  const { operation } = await h.client.updateConfig({
    target: { global: true },
    settings: { environment_label: 'ci', workload_restart_on_exit: false },
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 30_000,
  })
  assert.equal(operation.targetKind, 'GLOBAL')
  assert.equal(operation.state, 'APPLIED', h.logs())
  assert.deepEqual(
    { targets: operation.fleet.targets, applied: operation.fleet.applied, failed: operation.fleet.failed },
    { targets: 2, applied: 2, failed: 0 },
  )
  const global = await h.client.getSettings({ global: true })
  assert.equal(global.scope, 'GLOBAL')
  const label = global.values.find((s) => s.key === 'environment_label')
  assert.equal(label.value, 'ci')
  const effective = await h.client.getSettings({ sandbox: 'alpha' })
  const restart = effective.effective.find((s) => s.key === 'workload_restart_on_exit')
  assert.equal(restart.value, false)
  assert.equal(restart.scope, 'GLOBAL')

  const cleared = await h.client.updateConfig({
    target: { global: true },
    deleteSettings: ['environment_label', 'workload_restart_on_exit'],
    mode: 'COMMIT_ONLY',
  })
  const final = await h.client.waitForApply(cleared.operation.id, { timeoutMs: 30_000 })
  assert.equal(final.state, 'APPLIED')
  assert.deepEqual((await h.client.getSettings({ global: true })).values, [])
})

test('listOperationTargets names each sandbox of a fleet operation, a page at a time', async () => {
  const { operation } = await h.client.updateConfig({
    target: { global: true },
    settings: { environment_label: 'targets' },
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 30_000,
  })
  assert.equal(operation.state, 'APPLIED', h.logs())
  const first = await h.client.listOperationTargets(operation.id, { pageSize: 1 })
  assert.equal(first.targets.length, 1)
  assert.deepEqual({ targets: first.counts.targets, applied: first.counts.applied }, { targets: 2, applied: 2 })
  assert.ok(first.nextPageToken)
  const second = await h.client.listOperationTargets(operation.id, { pageSize: 1, pageToken: first.nextPageToken })
  assert.equal(second.nextPageToken, undefined)
  const targets = [...first.targets, ...second.targets]
  assert.deepEqual(targets.map((t) => t.sandboxName).sort(), ['alpha', 'beta'])
  assert.deepEqual(targets.map((t) => t.sandboxId).sort(), [alpha.id, beta.id].sort())
  for (const t of targets) {
    assert.equal(t.state, 'APPLIED')
    assert.equal(t.workspace, 'default')
  }
  const failed = await h.client.listOperationTargets(operation.id, { states: ['FAILED'] })
  assert.deepEqual(failed.targets, [])
  await h.client.updateConfig({ target: { global: true }, deleteSettings: ['environment_label'], mode: 'COMMIT_ONLY' })
})

test('providers: create, attach, detach; credentials never come back', async () => {
  const expires = new Date(Date.UTC(2031, 0, 1))
  const created = await h.client.createProvider({
    name: 'gh',
    type: 'github',
    env: { GITHUB_API: 'https://api.github.com' },
    credentials: { GITHUB_TOKEN: 'ghp_very_secret' },
    expiresAt: expires,
  })
  assert.equal(created.provider.type, 'github')
  assert.deepEqual(created.provider.env, { GITHUB_API: 'https://api.github.com' })
  assert.deepEqual(created.provider.credentialNames, ['GITHUB_TOKEN'])
  assert.equal(Date.parse(created.provider.expiresAt), expires.getTime())
  assert.ok(Math.abs(Date.parse(created.provider.createdAt) - Date.now()) < 3_600_000)
  assert.equal(created.provider.updatedAt, created.provider.createdAt)
  assert.ok(!JSON.stringify(created).includes('ghp_very_secret'))
  // Its credential expires: an inspection of a sandbox attaching it says when (names only).
  const credentialExpiry = async () => (await h.client.inspectSession('alpha')).credentialExpiry
  assert.deepEqual(await credentialExpiry(), [])

  const attached = await h.client.attachProvider('alpha', 'gh')
  assert.deepEqual(attached.sandbox.providers, ['gh'])
  const expiry = await credentialExpiry()
  assert.equal(expiry.length, 1)
  assert.equal(expiry[0].name, 'GITHUB_TOKEN')
  assert.equal(expiry[0].provider, 'gh')
  assert.equal(Date.parse(expiry[0].expiresAt), expires.getTime())
  assert.ok(attached.sandbox.attachmentEpoch > 0)
  // The gateway may track delivery of the new environment as an operation.
  if (attached.operation) {
    const applied = await h.client.waitForApply(attached.operation.id, { timeoutMs: 30_000 })
    assert.equal(applied.state, 'APPLIED', h.logs())
  }

  const listed = await h.client.listProviders()
  assert.deepEqual(listed.map((p) => p.name), ['gh'])
  assert.deepEqual((await h.client.getProvider('gh')).attachedSandboxIds, [alpha.id])

  const detached = await h.client.detachProvider('alpha', 'gh')
  assert.deepEqual(detached.sandbox.providers, [])
  assert.ok(detached.sandbox.attachmentEpoch > attached.sandbox.attachmentEpoch)
  await h.client.deleteProvider('gh')
  assert.deepEqual(await h.client.listProviders(), [])
})

test('policy revisions are listed newest first and readable by number', async () => {
  const { operation } = await h.client.updateConfig({
    target: { sandbox: 'alpha' },
    policy: policyWithPort(6443),
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 30_000,
  })
  assert.equal(operation.state, 'APPLIED')
  const revisions = await h.client.listSandboxPolicies('alpha')
  assert.deepEqual(
    revisions.map((r) => r.revision),
    Array.from({ length: operation.policyRevision }, (_, i) => operation.policyRevision - i),
  )
  assert.ok(revisions.every((r) => r.policyYaml === undefined))
  const first = await h.client.getSandboxPolicy('alpha', 1)
  assert.equal(first.policy.revision, 1)
  assert.equal(first.effectiveSource, 'SANDBOX')
  assert.match(first.policy.policyHash, /^[0-9a-f]{64}$/)
})

test('sessions: list and inspect', async () => {
  const sessions = await h.client.listSessions()
  assert.deepEqual(sessions.map((s) => s.sandboxName).sort(), ['alpha', 'beta'])
  assert.ok(sessions.every((s) => s.mode === 'PUSH'))
  const inspection = await h.client.inspectSession('alpha')
  assert.equal(inspection.connected, true)
  assert.equal(inspection.negotiatedMode, 'PUSH')
  assert.equal(inspection.gatewayMode, 'push')
  assert.equal(inspection.sandbox.id, alpha.id)
  assert.ok(inspection.components.some((c) => c.component === 'sandbox_config'))
  assert.deepEqual(inspection.pendingOperations, [])
  // The example policy's request_logger is a remote middleware no test supervisor registers;
  // it is fail_open, so the workload started degraded and the supervisor said so.
  let readiness
  for (let tries = 0; tries < 300 && !readiness; tries++) {
    readiness = (await h.client.inspectSession('alpha')).runtimeReadiness
    if (!readiness) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  assert.ok(readiness, 'no runtime readiness reported')
  assert.equal(readiness.workloadStarted, true)
  assert.equal(readiness.middlewares.length, 1)
  const [audit] = readiness.middlewares
  assert.equal(audit.name, 'request_audit')
  assert.equal(audit.implementation, 'request_logger')
  assert.equal(audit.reachable, false)
  assert.equal(audit.failClosed, false)
  assert.equal(audit.endpoint ?? null, null)
  assert.match(audit.error, /not registered/)
})

test('listOperations filters by sandbox and state', async () => {
  const ops = await h.client.listOperations({ sandbox: 'alpha', states: ['APPLIED'] })
  assert.ok(ops.length >= 1)
  // Its own operations, and the fleet operations that targeted it.
  assert.ok(ops.every((op) => op.state === 'APPLIED' && (op.target === alpha.id || op.targetKind !== 'SANDBOX')))
  assert.ok(ops.some((op) => op.target === alpha.id))
  assert.ok(ops.some((op) => op.targetKind === 'GLOBAL'))
  const limited = await h.client.listOperations({ pageSize: 1 })
  assert.equal(limited.length, 1)
})

test('stopping and deleting a sandbox', async () => {
  const stopped = await h.client.setSandboxLifecycle('beta', 'STOPPED')
  assert.equal(stopped.lifecycle, 'STOPPED')
  await beta.supervisor.stop()
  const deleted = await h.client.deleteSandbox('beta')
  assert.equal(deleted.sandbox.lifecycle, 'DELETED')
  assert.equal(typeof deleted.cancelledOperations, 'number')
  assert.deepEqual((await h.client.listSandboxes()).map((s) => s.name), ['alpha'])
  const all = await h.client.listSandboxes({ includeDeleted: true })
  assert.deepEqual(all.map((s) => s.name).sort(), ['alpha', 'beta'])
})

test('the global policy is read like a sandbox policy', async () => {
  await assert.rejects(h.client.getGlobalPolicy(), /no global policy has been set/)
  assert.deepEqual(await h.client.listGlobalPolicies(), [])
  const { operation: set } = await h.client.updateConfig({
    target: { global: true },
    policy: policyWithPort(7443),
  })
  try {
    const latest = await h.client.getGlobalPolicy()
    assert.equal(latest.policy.revision, set.globalPolicyRevision)
    assert.equal(latest.policy.sandboxId, undefined)
    assert.match(latest.policy.policyYaml, /7443/)
    assert.equal(latest.effectiveSource, 'GLOBAL')
  } finally {
    await h.client.updateConfig({ target: { global: true }, clearGlobalPolicy: true })
  }
  const history = await h.client.listGlobalPolicies()
  assert.deepEqual(history.map((r) => r.revision), [2, 1])
  assert.equal(history[0].policyHash, '')
  assert.deepEqual((await h.client.getGlobalPolicy(1)).policy.operationId, set.id)
})
