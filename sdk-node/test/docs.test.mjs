// Runs the examples of docs/sdk-node.md against a real gateway, so the doc
// cannot promise what the SDK does not do.
//
// A ```js block preceded by `<!-- test -->` is an example; `<!-- test:prelude -->`
// marks the connect example, which runs alone and is prepended to every other
// one (they use its `client`). `expect="REGEX"` names output the example must
// print. Each runs as its own ES module in a scratch directory holding
// `policy.yaml` and a node_modules link to this package, as a user's would.

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { after, before, test } from 'node:test'
import { promisify } from 'node:util'

import { Harness, SDK_DIR, policyWithPort } from './harness.mjs'

const run = promisify(execFile)
const DOC = path.join(SDK_DIR, '..', 'docs', 'sdk-node.md')

function examples(markdown) {
  const found = []
  const marker = /<!--\s*test(:prelude)?(?:\s+expect="([^"]*)")?\s*-->\s*\n```js\n([\s\S]*?)\n```/g
  for (const match of markdown.matchAll(marker)) {
    const line = markdown.slice(0, match.index).split('\n').length
    found.push({ prelude: Boolean(match[1]), expect: match[2], code: match[3], line })
  }
  return found
}

const blocks = examples(fs.readFileSync(DOC, 'utf8'))
const prelude = blocks.find((b) => b.prelude)

let h
let workdir
before(async () => {
  h = await Harness.start()
  await h.sandbox('demo', { supervisor: true })
  await h.sandbox('idle', { workspace: 'staging' })
  workdir = fs.mkdtempSync(path.join(h.dir, 'docs-'))
  fs.writeFileSync(path.join(workdir, 'policy.yaml'), policyWithPort(8443))
  const scope = path.join(workdir, 'node_modules', '@openshell')
  fs.mkdirSync(scope, { recursive: true })
  fs.symlinkSync(SDK_DIR, path.join(scope, 'sdk'), 'dir')
})
after(async () => {
  await h?.stop()
})

test('the doc has a prelude and examples for each documented flow', () => {
  assert.ok(prelude, 'a <!-- test:prelude --> block')
  assert.ok(blocks.length >= 6, `found ${blocks.length} examples`)
})

for (const [i, block] of blocks.entries()) {
  test(`docs/sdk-node.md example at line ${block.line}`, async (t) => {
    const code = block.prelude ? block.code : `${prelude.code}\n\n${block.code}`
    const file = path.join(workdir, `example-${i}.mjs`)
    fs.writeFileSync(file, `${code}\n`)
    let out
    try {
      out = await run(process.execPath, [file], {
        cwd: workdir,
        env: { ...process.env, OPENSHELL_GATEWAY: h.endpoint, OPENSHELL_TOKEN: h.token },
        timeout: 120_000,
      })
    } catch (err) {
      assert.fail(`example failed (exit ${err.code}):\n${err.stdout}\n${err.stderr}\n${h.logs()}`)
    }
    t.diagnostic(out.stdout.trim())
    if (block.expect) assert.match(out.stdout, new RegExp(block.expect))
  })
}
