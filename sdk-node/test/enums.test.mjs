// The string enums of native.js are the Rust core's: every contract enum is
// exported with exactly the core's members, in wire order, and the docs name
// exactly the core's terminal states. No gateway needed.

import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'

import native from '../native.js'
import { SDK_DIR } from './harness.mjs'

test('every contract enum is exported with the Rust core members', () => {
  const contract = native.contractEnums()
  assert.deepEqual(
    contract.map((e) => e.name).sort(),
    ['ApplyOutcome', 'DeliveryMode', 'OperationState', 'PolicySource', 'SandboxLifecycle', 'SettingScope', 'TargetKind', 'UpdateMode'],
  )
  for (const { name, members } of contract) {
    assert.ok(native[name], `native.js does not export ${name}`)
    assert.deepEqual(Object.values(native[name]), members, name)
  }
})

test('the terminal states are the Rust core rule, and the docs list them', () => {
  const terminal = native.terminalOperationStates()
  assert.deepEqual(terminal, ['APPLIED', 'FAILED', 'SUPERSEDED', 'INACTIVE', 'CANCELLED'])
  const states = new Set(Object.values(native.OperationState))
  assert.ok(terminal.every((s) => states.has(s)))

  const doc = fs.readFileSync(path.join(SDK_DIR, '..', 'docs', 'sdk-node.md'), 'utf8')
  const sentence = /Terminal states are\s+([^.]*)\./.exec(doc)
  assert.ok(sentence, 'docs/sdk-node.md says which states are terminal')
  assert.deepEqual(sentence[1].match(/[A-Z_]{2,}/g), terminal)
})
