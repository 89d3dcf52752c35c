// Sandbox logs from Node against a real gateway and supervisor: the
// supervisor's own lines arrive, a follow streams a line written after it
// started, and bad input is refused with the error class that names it.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { InvalidArgumentError, NotFoundError } from '../index.js'
import { Harness, eventually, policyWithPort } from './harness.mjs'

let h
before(async () => {
  h = await Harness.start()
})
after(async () => {
  await h?.stop()
})

test('getSandboxLogs returns the lines the supervisor pushed', async () => {
  await h.sandbox('node-logs', { supervisor: true })
  const logs = await eventually(
    async () => {
      const read = await h.client.getSandboxLogs('node-logs')
      return read.lines.some((l) => l.message === 'workload started') ? read : undefined
    },
    { what: 'the supervisor lines at the gateway' },
  )
  const started = logs.lines.find((l) => l.message === 'workload started')
  assert.equal(started.source, 'supervisor')
  assert.equal(started.level, 'INFO')
  assert.match(started.time, /^\d{4}-\d\d-\d\dT/)
  assert.equal(typeof started.timestampMs, 'number')
  assert.ok(logs.bufferTotal >= logs.lines.length)
  assert.equal(logs.supervisorDroppedLines, 0)

  const none = await h.client.getSandboxLogs('node-logs', { sources: ['workload'], minLevel: 'ERROR' })
  assert.deepEqual(none.lines, [])
  const future = await h.client.getSandboxLogs('node-logs', { sinceMs: Date.now() + 3_600_000 })
  assert.deepEqual(future.lines, [])
  const one = await h.client.getSandboxLogs('node-logs', { lines: 1 })
  assert.equal(one.lines.length, 1)
})

test('watchSandboxLogs replays, then streams a line written after it started', async () => {
  await h.sandbox('node-follow', { supervisor: true })
  await eventually(
    async () => (await h.client.getSandboxLogs('node-follow')).lines.some((l) => l.message === 'workload started'),
    { what: 'the first lines' },
  )
  const watch = h.client.watchSandboxLogs('node-follow', { sources: ['supervisor'] })
  const seen = []
  let applied = false
  for await (const event of watch) {
    if (event.kind !== 'line') continue
    seen.push(event.line.message)
    if (event.line.message === 'workload started') {
      // Replayed; now make the supervisor write a new line.
      await h.client.updateConfig({ target: { sandbox: 'node-follow' }, policy: policyWithPort(8443), mode: 'COMMIT_ONLY' })
    }
    if (seen.includes('workload started') && event.line.message === 'configuration applied' && event.line.fields.policy_revision === '2') {
      applied = true
      break
    }
  }
  assert.ok(applied, `lines seen: ${seen.join(' | ')}`)
  // The break cancelled the follow: the iterator is done.
  assert.deepEqual(await watch.next(), { done: true, value: undefined })
})

test('failures name what is wrong', async () => {
  await assert.rejects(h.client.getSandboxLogs('no-such-sandbox'), NotFoundError)
  await assert.rejects(h.client.getSandboxLogs('node-logs', { minLevel: 'LOUD' }), (err) => {
    assert.ok(err instanceof InvalidArgumentError)
    assert.match(err.message, /min_level/)
    return true
  })
  await assert.rejects(h.client.getSandboxLogs('node-logs', { lines: -1 }), TypeError)
  assert.throws(() => h.client.watchSandboxLogs('node-logs', { lines: 1.5 }), TypeError)
  const watch = h.client.watchSandboxLogs('no-such-sandbox')
  await assert.rejects(watch.next(), NotFoundError)
})
