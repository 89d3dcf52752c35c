'use strict'
// The error classes of @openshell/sdk, and the one place that turns a native
// rejection into them.
//
// The native layer (src/error.rs) rejects with a plain Error whose message is
// a JSON document { code, message, violations }, because napi errors carry no
// other free-form data. `fromNative` decodes it; every Client method goes
// through it, so the code-to-class mapping exists exactly once.

class OpenShellError extends Error {
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
    return new InvalidArgumentError(String(err.message), { cause: err })
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
  fromNative,
}
