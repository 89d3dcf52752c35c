'use strict'
// The error classes of @openshell/sdk, and the one place that turns a native
// rejection into them.
//
// The native layer (src/error.rs) rejects with a plain Error whose message is
// a JSON document { code, message, violations }, because napi errors carry no
// other free-form data. `fromNative` decodes it; every Client method goes
// through it, so the code-to-class mapping exists exactly once.

// Marks the TypeErrors of argumentTypeError: they count as OpenShellError and
// InvalidArgumentError too, so one `catch` handles every refused input.
const ARGUMENT_TYPE = Symbol('openshell.argumentType')

class OpenShellError extends Error {
  static [Symbol.hasInstance](value) {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true
    return (this === OpenShellError || this === InvalidArgumentError) && value?.[ARGUMENT_TYPE] === true
  }

  /**
   * @param {string} message
   * @param {{ code?: string, cause?: unknown }} [options]
   */
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = new.target.name
    /** Stable machine-readable code, e.g. 'NOT_FOUND' (SdkError::code()). */
    this.code = options.code ?? 'UNKNOWN'
  }
}

class InvalidArgumentError extends OpenShellError {
  constructor(message, { violations = [], ...options } = {}) {
    super(message, { ...options, code: 'INVALID_ARGUMENT' })
    /** One entry per bad field, e.g. { field: 'network_policies.github…', message }. */
    this.violations = violations
  }
}

class NotFoundError extends OpenShellError {
  constructor(message, options = {}) {
    super(message, { ...options, code: 'NOT_FOUND' })
  }
}

class AlreadyExistsError extends OpenShellError {
  constructor(message, options = {}) {
    super(message, { ...options, code: 'ALREADY_EXISTS' })
  }
}

class FailedPreconditionError extends OpenShellError {
  constructor(message, options = {}) {
    super(message, { ...options, code: 'FAILED_PRECONDITION' })
  }
}

class UnauthenticatedError extends OpenShellError {
  constructor(message, options = {}) {
    super(message, { ...options, code: 'UNAUTHENTICATED' })
  }
}

class UnavailableError extends OpenShellError {
  constructor(message, options = {}) {
    super(message, { ...options, code: 'UNAVAILABLE' })
  }
}

// The wait deadline passed while the operation was still live. Not a failure
// of the operation: it keeps going on the gateway and can be waited on again.
class WaitTimeoutError extends OpenShellError {
  constructor(operation, options = {}) {
    super(`operation ${operation.id} is still ${operation.state} after the wait deadline`, {
      ...options,
      code: 'WAIT_TIMED_OUT',
    })
    this.operation = operation
    this.operationId = operation.id
  }
}

// The caller's AbortSignal fired. Only the local wait stopped; the operation
// is untouched on the gateway.
class AbortError extends OpenShellError {
  constructor(operationId, reason) {
    super(`stopped waiting for operation ${operationId}; the operation itself is unaffected`, {
      code: 'ABORTED',
      cause: reason,
    })
    this.operationId = operationId
  }
}

const BY_CODE = {
  NOT_FOUND: NotFoundError,
  ALREADY_EXISTS: AlreadyExistsError,
  FAILED_PRECONDITION: FailedPreconditionError,
  UNAUTHENTICATED: UnauthenticatedError,
  UNAVAILABLE: UnavailableError,
}

// napi's own argument-conversion failures (a number where a string belongs,
// an unknown enum value) say so in these status codes; to a caller they are
// invalid arguments like any other.
const NAPI_ARGUMENT_CODES = new Set([
  'InvalidArg',
  'ObjectExpected',
  'StringExpected',
  'NameExpected',
  'FunctionExpected',
  'NumberExpected',
  'BooleanExpected',
  'ArrayExpected',
  'BigintExpected',
])

/**
 * An argument of the wrong type or shape, refused before anything is sent: a
 * TypeError, as JavaScript has it, that names the argument ("waitTimeoutMs must
 * be a number of milliseconds") and is also an InvalidArgumentError with
 * `code` 'INVALID_ARGUMENT' and one violation for the argument.
 */
function argumentTypeError(field, message, cause) {
  const err = new TypeError(`${field} ${message}`, cause === undefined ? undefined : { cause })
  err.code = 'INVALID_ARGUMENT'
  err.violations = [{ field, message }]
  Object.defineProperty(err, ARGUMENT_TYPE, { value: true })
  return err
}

// The argument name of an object napi names when it is passed on its own
// (getSettings(target)); an options object's fields need no prefix.
const OBJECT_PATHS = { ConfigTarget: 'target' }
// Fields that are objects of strings: napi names the field for a bad value.
const STRING_MAPS = new Set(['env', 'credentials'])
// The argument an enum given positionally is passed as.
const ENUM_ARGUMENTS = { SandboxLifecycle: 'lifecycle' }

/** What the Rust type of a field means to a JavaScript caller. */
function expected(rustType, field) {
  if (rustType === 'f64') return field.endsWith('Ms') ? 'a number of milliseconds' : 'a number'
  if (rustType === 'u32') return 'a non-negative integer'
  if (rustType === 'String') return 'a string'
  if (rustType === 'bool') return 'a boolean'
  if (/^(Vec|Array)/.test(rustType)) return 'an array'
  return 'an object'
}

/**
 * napi's own conversion failures ("Failed to convert napi value String into
 * rust type `f64` on UpdateConfigOptions.waitTimeoutMs") as the argument
 * errors callers can read; undefined for a message of another shape.
 */
function fromConversion(err) {
  const text = String(err?.message ?? '')
  const missing = /^Missing field `([^`]+)`/.exec(text)
  if (missing) return argumentTypeError(missing[1], 'is required', err)
  // napi appends " on Struct.field" at each level, innermost first.
  const path = [...text.matchAll(/ on (\w+)\.(\w+)/g)].reverse()
  const variant = /^value `([^`]*)` does not match any variant of enum `(\w+)`/.exec(text)
  const field = path.length
    ? [OBJECT_PATHS[path[0][1]], ...path.map((on) => on[2])].filter(Boolean).join('.')
    : ENUM_ARGUMENTS[variant?.[2]]
  if (!field) return undefined
  if (variant) return argumentTypeError(field, `must be a ${variant[2]} name, not ${variant[1]}`, err)
  if (/^Value is none of these types/.test(text)) {
    return argumentTypeError(field, 'values must be strings, numbers or booleans', err)
  }
  if (/Array/.test(text)) return argumentTypeError(field, 'must be an array', err)
  const rust = /into rust type `([^`]+)`/.exec(text)?.[1] ?? ''
  if (STRING_MAPS.has(field)) {
    return argumentTypeError(field, rust === 'String' ? 'values must be strings' : 'must be an object', err)
  }
  return argumentTypeError(field, `must be ${expected(rust, field)}`, err)
}

function decode(message) {
  if (typeof message !== 'string' || !message.startsWith('{')) return undefined
  try {
    const payload = JSON.parse(message)
    return payload && typeof payload.code === 'string' ? payload : undefined
  } catch {
    return undefined
  }
}

/** Maps anything the native layer threw to an OpenShellError subclass. */
function fromNative(err) {
  if (err instanceof OpenShellError) return err
  const payload = decode(err?.message)
  if (payload) {
    const { code, message } = payload
    if (code === 'INVALID_ARGUMENT') {
      return new InvalidArgumentError(message, { violations: payload.violations ?? [] })
    }
    const Class = BY_CODE[code]
    return Class ? new Class(message) : new OpenShellError(message, { code })
  }
  if (NAPI_ARGUMENT_CODES.has(err?.code)) {
    // A shape fromConversion does not know: napi's wording stays in `cause`,
    // out of the message callers show.
    return fromConversion(err) ??
      new InvalidArgumentError('an argument has the wrong type', { cause: err })
  }
  return new OpenShellError(String(err?.message ?? err), { code: 'UNKNOWN', cause: err })
}

module.exports = {
  OpenShellError,
  InvalidArgumentError,
  NotFoundError,
  AlreadyExistsError,
  FailedPreconditionError,
  UnauthenticatedError,
  UnavailableError,
  WaitTimeoutError,
  AbortError,
  argumentTypeError,
  fromNative,
}
