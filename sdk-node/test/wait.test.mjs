// Following operations from Node: onProgress order, AbortSignal that leaves
// the operation alone, and the async-iterator form.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { AbortError, OpenShellError } from '../index.js'
import { Harness, policyWithPort } from './harness.mjs'

// The order states move in; a terminal state is last.
const RANK = { PENDING: 0, DELIVERED: 1, APPLIED: 2 }

let h
before(async () => {
  h = await Harness.start()
})
after(async () => {
  await h?.stop()
})

/** A committed change on a sandbox whose supervisor is not running yet, so it stays PENDING. */
async function pendingChange(name, port) {
  const sb = await h.sandbox(name)
  const { operation } = await h.client.updateConfig({
    target: { sandbox: name },
    policy: policyWithPort(port),
    mode: 'COMMIT_ONLY',
  })
  assert.equal(operation.state, 'PENDING')
  return { sb, operation }
}

test('onProgress fires once per state change, in order, ending with the result', async () => {
  const { sb, operation } = await pendingChange('progress', 8001)
  const seen = []
  let subscribed
  const firstUpdate = new Promise((resolve) => {
    subscribed = resolve
  })
  const waiting = h.client.waitForApply(operation.id, {
    timeoutMs: 30_000,
    onProgress: (op) => {
      seen.push(op)
      subscribed()
    },
  })
  // Only start the supervisor once the wait reported the live state, so the
  // whole PENDING → APPLIED path is observed.
  await firstUpdate
  sb.startSupervisor()
  const final = await waiting

  const states = seen.map((op) => op.state)
  assert.equal(final.state, 'APPLIED', h.logs())
  assert.equal(states[0], 'PENDING')
  assert.equal(states.at(-1), 'APPLIED')
  assert.deepEqual(seen.at(-1), final)
  for (let i = 1; i < states.length; i++) {
    assert.ok(RANK[states[i]] > RANK[states[i - 1]], `states went ${states.join(' → ')}`)
  }
  assert.ok(seen.every((op) => op.id === operation.id))
})

test('aborting a wait rejects with AbortError and leaves the operation to apply', async () => {
  const { sb, operation } = await pendingChange('abort', 8002)
  const controller = new AbortController()
  const states = []
  const waiting = h.client.waitForApply(operation.id, {
    timeoutMs: 60_000,
    signal: controller.signal,
    onProgress: (op) => {
      states.push(op.state)
      controller.abort(new Error('operator pressed ctrl-c'))
    },
  })
  const err = await waiting.then(() => assert.fail('the wait was aborted'), (e) => e)
  assert.ok(err instanceof AbortError, String(err))
  assert.ok(err instanceof OpenShellError)
  assert.equal(err.name, 'AbortError')
  assert.equal(err.code, 'ABORTED')
  assert.equal(err.operationId, operation.id)
  assert.equal(err.cause.message, 'operator pressed ctrl-c')
  assert.deepEqual(states, ['PENDING'])

  // The gateway still has it, unchanged, and applies it once a supervisor runs.
  const still = await h.client.getOperation(operation.id)
  assert.equal(still.state, 'PENDING')
  assert.equal(still.policyRevision, operation.policyRevision)
  sb.startSupervisor()
  const final = await h.client.waitForApply(operation.id, { timeoutMs: 30_000 })
  assert.equal(final.state, 'APPLIED', h.logs())

  // A signal aborted before the call rejects at once, without touching anything.
  const early = await h.client
    .waitForApply(operation.id, { signal: AbortSignal.abort() })
    .then(() => assert.fail('already aborted'), (e) => e)
  assert.ok(early instanceof AbortError)
})

test('watchOperation is an async iterator of state changes', async () => {
  const { sb, operation } = await pendingChange('iterate', 8003)
  const watch = h.client.watchOperation(operation.id, { timeoutMs: 30_000 })
  assert.equal(watch.operationId, operation.id)
  const states = []
  for await (const op of watch) {
    states.push(op.state)
    if (states.length === 1) sb.startSupervisor()
  }
  assert.equal(states[0], 'PENDING')
  assert.equal(states.at(-1), 'APPLIED', h.logs())
  const after = await watch.next()
  assert.equal(after.done, true)
  assert.equal(after.value.state, 'APPLIED')
})

test('breaking out of a watch stops waiting but not the operation', async () => {
  const { sb, operation } = await pendingChange('break', 8004)
  for await (const op of h.client.watchOperation(operation.id, { timeoutMs: 60_000 })) {
    assert.equal(op.state, 'PENDING')
    break
  }
  assert.equal((await h.client.getOperation(operation.id)).state, 'PENDING')
  sb.startSupervisor()
  const final = await h.client.waitForApply(operation.id, { timeoutMs: 30_000 })
  assert.equal(final.state, 'APPLIED')
})

test('an onProgress that throws rejects the wait with its error', async () => {
  const { operation } = await pendingChange('throws', 8005)
  const boom = new Error('progress bar broke')
  await assert.rejects(
    h.client.waitForApply(operation.id, {
      timeoutMs: 30_000,
      onProgress: () => {
        throw boom
      },
    }),
    (err) => err === boom,
  )
  assert.equal((await h.client.getOperation(operation.id)).state, 'PENDING')
})
