// Every argument of every Client call, and every field of its option
// objects, given a value of the wrong type, is refused before anything is
// sent with the SDK's InvalidArgumentError (code INVALID_ARGUMENT) naming it,
// never with a raw napi conversion message. The calls, their parameters and
// the fields of their option types are read from index.d.ts with the
// TypeScript compiler, so a new call or option is checked without being
// listed here.

import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import path from 'node:path'
import { after, before, test } from 'node:test'

import { Client, InvalidArgumentError, OpenShellError } from '../index.js'
import { Harness, SDK_DIR } from './harness.mjs'

const ts = createRequire(import.meta.url)(path.join(SDK_DIR, 'node_modules', 'typescript'))

// What a binding's own conversion errors and JS's own type errors say; none
// may reach a caller.
const RAW = /napi|Failed to convert|rust type|cannot be converted|is not a function|Cannot read propert|undefined|\[object /

// Positional parameters that are bags of options: their fields are named on
// their own ('waitTimeoutMs'), as the SDK and the gateway name them. Other
// object parameters prefix their fields with their name ('target.sandbox').
const OPTION_BAGS = new Set(['options', 'spec', 'update'])

// Valid values for required parameters and fields, so each call fails only
// on the value under test. A new required one must be added here.
const VALID = {
  sandbox: 'args',
  id: 'op-00000000-0000-7000-8000-000000000000',
  provider: 'no-such-provider',
  lifecycle: 'STOPPED',
  name: 'args-new',
  type: 'github',
  target: { sandbox: 'args' },
}

let h
before(async () => {
  h = await Harness.start()
  await h.sandbox('args')
})
after(async () => {
  await h?.stop()
})

/** Client's methods and Client.connect, as the TypeScript compiler reads index.d.ts. */
function surface() {
  const file = path.join(SDK_DIR, 'index.d.ts')
  const program = ts.createProgram([file], { strict: true, target: ts.ScriptTarget.ES2022 })
  const checker = program.getTypeChecker()
  const source = program.getSourceFile(file)
  let client
  ts.forEachChild(source, (node) => {
    if (ts.isClassDeclaration(node) && node.name?.text === 'Client') client = node
  })
  assert.ok(client, 'index.d.ts declares no Client class')
  const calls = new Map()
  for (const member of client.members) {
    if (!ts.isMethodDeclaration(member) || !member.name || !ts.isIdentifier(member.name)) continue
    const name = member.name.text
    // Overloads (updateConfig) share their parameter list: the widest is last.
    calls.set(name, {
      name,
      isStatic: member.modifiers?.some((m) => m.kind === ts.SyntaxKind.StaticKeyword) ?? false,
      params: member.parameters.map((p) => ({
        name: p.name.getText(source),
        optional: Boolean(p.questionToken),
        type: checker.getTypeAtLocation(p),
      })),
    })
  }
  return { checker, calls: [...calls.values()] }
}

function constituents(type) {
  return type.isUnion() ? type.types : [type]
}

/** Whether a value of JS type `kind` fits `type` at all (ignoring literal values). */
function fits(checker, type, kind) {
  return constituents(checker.getNonNullableType(type)).some((t) => {
    const f = t.flags
    if (kind === 'string') return Boolean(f & (ts.TypeFlags.StringLike | ts.TypeFlags.Any))
    if (kind === 'number') return Boolean(f & (ts.TypeFlags.NumberLike | ts.TypeFlags.Any))
    if (kind === 'boolean') return Boolean(f & (ts.TypeFlags.BooleanLike | ts.TypeFlags.Any))
    return false
  })
}

const WRONG = [42, 'wrong', true]

/** Values of the wrong type for `type`: each primitive it does not admit. */
function wrongValues(checker, type) {
  return WRONG.filter((value) => !fits(checker, type, typeof value))
}

/** The declared fields of an options type (every member of a union of object types). */
function fields(checker, type) {
  const seen = new Map()
  for (const t of constituents(checker.getNonNullableType(type))) {
    if (!(t.flags & (ts.TypeFlags.Object | ts.TypeFlags.Intersection)) || checker.isArrayType(t)) continue
    if (t.getCallSignatures().length > 0) continue
    // Dates, AbortSignals and records are values, not bags of named fields.
    if (['Date', 'AbortSignal'].includes(t.getSymbol()?.getName())) continue
    if (checker.getIndexInfosOfType(t).length > 0) continue
    for (const property of checker.getPropertiesOfType(t)) {
      if (seen.has(property.getName())) continue
      const declaration = property.valueDeclaration ?? property.declarations?.[0]
      seen.set(property.getName(), {
        name: property.getName(),
        optional: Boolean(property.flags & ts.SymbolFlags.Optional),
        type: checker.getTypeOfSymbolAtLocation(property, declaration),
      })
    }
  }
  return [...seen.values()]
}

/** A valid value for a required parameter or field of `type`. */
function valid(checker, name, type) {
  if (name in VALID) return VALID[name]
  const nested = fields(checker, type)
  assert.ok(nested.length > 0, `no valid value known for required ${name}`)
  return Object.fromEntries(
    nested.filter((f) => !f.optional).map((f) => [f.name, valid(checker, f.name, f.type)]),
  )
}

/** Every field of `type`, nested objects' fields included, as key paths. */
function leaves(checker, type, keys = []) {
  return fields(checker, type).flatMap((field) => {
    const path = [...keys, field.name]
    return [{ path, type: field.type }, ...leaves(checker, field.type, path)]
  })
}

/** `object` with `value` at `path`, copying each object on the way. */
function withValue(object, [key, ...rest], value) {
  const copy = { ...object }
  copy[key] = rest.length ? withValue(copy[key] ?? {}, rest, value) : value
  return copy
}

/**
 * Every case: the call, its arguments with one value replaced, and the
 * field the error must name.
 */
function cases() {
  const { checker, calls } = surface()
  const out = []
  for (const call of calls) {
    const base = call.params.map((p) => (p.optional ? undefined : valid(checker, p.name, p.type)))
    call.params.forEach((param, index) => {
      for (const value of wrongValues(checker, param.type)) {
        const args = [...base]
        args[index] = value
        out.push({ call, args, field: param.name, value })
      }
      const prefix = OPTION_BAGS.has(param.name) ? [] : [param.name]
      for (const leaf of leaves(checker, param.type)) {
        for (const value of wrongValues(checker, leaf.type)) {
          const args = [...base]
          args[index] = withValue(base[index] ?? {}, leaf.path, value)
          out.push({ call, args, field: [...prefix, ...leaf.path].join('.'), value })
        }
      }
    })
  }
  return out
}

function describe({ call, args }) {
  const shown = args.map((a) => (a === undefined ? 'undefined' : JSON.stringify(a)))
  return `${call.isStatic ? 'Client.' : ''}${call.name}(${shown.join(', ')})`
}

async function outcome(run) {
  try {
    return { value: await run() }
  } catch (err) {
    return { err }
  }
}

test('every argument and option of the wrong type is an InvalidArgumentError naming it', async () => {
  const all = cases()
  const names = new Set(all.map((c) => c.call.name))
  for (const name of ['connect', 'updateConfig', 'waitForApply', 'watchOperation', 'watchSandboxLogs', 'createProvider']) {
    assert.ok(names.has(name), `the enumeration missed ${name}`)
  }
  const fieldsSeen = new Set(all.map((c) => `${c.call.name}:${c.field}`))
  for (const field of [
    'connect:connectTimeoutMs',
    'updateConfig:target.sandbox',
    'updateConfig:settings',
    'updateConfig:waitTimeoutMs',
    'updateConfig:policyEdits.addEndpoints',
    'updateConfig:policyEdits.ruleName',
    'updateConfig:expectedRevision',
    'waitForApply:onProgress',
    'waitForApply:signal',
    'getSettings:target.global',
    'listOperations:states',
    'getSandboxLogs:sinceMs',
    'createProvider:expiresAt',
    'setSandboxLifecycle:lifecycle',
  ]) {
    assert.ok(fieldsSeen.has(field), `the enumeration missed ${field}`)
  }
  assert.ok(all.length > 150, `only ${all.length} cases`)

  const failures = []
  for (const c of all) {
    const what = describe(c)
    const { err, value } = await outcome(async () => {
      const owner = c.call.isStatic ? Client : h.client
      const result = owner[c.call.name](...c.args)
      // watch* hand back an iterator at once: a refused argument throws before.
      if (typeof result?.cancel === 'function') result.cancel()
      return await result
    })
    if (err === undefined) {
      failures.push(`${what}: accepted (${JSON.stringify(value)?.slice(0, 80)})`)
      continue
    }
    const problems = []
    if (!(err instanceof InvalidArgumentError)) problems.push(`a ${err?.constructor?.name}`)
    if (!(err instanceof OpenShellError)) problems.push('not an OpenShellError')
    if (err.code !== 'INVALID_ARGUMENT') problems.push(`code ${err.code}`)
    const fields = (err.violations ?? []).map((v) => v.field)
    if (JSON.stringify(fields) !== JSON.stringify([c.field])) problems.push(`fields ${JSON.stringify(fields)}`)
    if (!String(err.message).startsWith(`${c.field} `) && !String(err.message).startsWith(`${c.field}: `)) {
      problems.push('message does not start with the field')
    }
    for (const text of [err.message, ...(err.violations ?? []).map((v) => v.message)]) {
      if (RAW.test(String(text))) problems.push('raw text')
    }
    if (problems.length) failures.push(`${what}: ${problems.join(', ')}: ${err.message}`)
  }
  assert.deepEqual(failures, [], `${failures.length} of ${all.length} cases:\n${failures.join('\n')}`)
})

// Entries of maps and arrays, which index.d.ts types only as a whole: the
// error names the entry.
const ENTRIES = [
  ['env.GITHUB_ORG', (c) => c.createProvider({ name: 'p', type: 'github', env: { GITHUB_ORG: 1 } })],
  ['credentials.T', (c) => c.updateProvider({ provider: 'p', credentials: { T: ['x'] } })],
  ['settings.log_level', (c) => c.updateConfig({ target: { sandbox: 'args' }, settings: { log_level: {} } })],
  ['deleteSettings[1]', (c) => c.updateConfig({ target: { sandbox: 'args' }, deleteSettings: ['a', 2] })],
  ['policyEdits.addEndpoints[0]', (c) => c.updateConfig({ target: { sandbox: 'args' }, policyEdits: { addEndpoints: [443] } })],
  ['states[0]', (c) => c.listOperations({ states: [1] })],
  ['sources[1]', (c) => c.getSandboxLogs('args', { sources: ['sandbox', null] })],
  ['sources[0]', (c) => c.watchSandboxLogs('args', { sources: [5] })],
]

test('a bad entry of a map or array is named by its path', async () => {
  for (const [field, run] of ENTRIES) {
    const { err } = await outcome(async () => run(h.client))
    assert.ok(err instanceof InvalidArgumentError, `${field}: ${err}`)
    assert.equal(err.code, 'INVALID_ARGUMENT')
    assert.deepEqual(err.violations.map((v) => v.field), [field])
    assert.ok(err.message.startsWith(`${field} `), err.message)
  }
})

test('an invalid Date is an InvalidArgumentError, not a RangeError', async () => {
  const { err } = await outcome(() =>
    h.client.createProvider({ name: 'p', type: 'github', expiresAt: new Date('not a date') }),
  )
  assert.ok(err instanceof InvalidArgumentError, String(err))
  assert.deepEqual(err.violations.map((v) => v.field), ['expiresAt'])
  assert.ok(!RAW.test(err.message), err.message)
})

test("a conversion failure of a shape errors.js does not know keeps napi's text out of the message", async () => {
  const { fromNative } = await import('../errors.js')
  const raw = Object.assign(new Error('Failed to convert napi value Object into rust type `f64`'), {
    code: 'NumberExpected',
  })
  const err = fromNative(raw)
  assert.ok(err instanceof InvalidArgumentError, String(err))
  assert.equal(err.code, 'INVALID_ARGUMENT')
  assert.ok(!RAW.test(err.message), err.message)
  assert.equal(err.cause, raw)
})
