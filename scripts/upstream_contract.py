#!/usr/bin/env python3
"""Compares this project's gRPC contract with upstream OpenShell's release.

Upstream's side is read from the published `openshell` Python package: its
generated modules (`openshell/_proto/*_pb2.py`) embed the serialized file
descriptors, which are the truth for names, field numbers, types, enums and
oneofs. This project's side is compiled from `proto/openshell/**/*.proto` with
`grpc_tools.protoc` into a descriptor set.

What is compared (see docs/protocol.md, "Checking the contract against
upstream's release"):

- every call of upstream's service `openshell.v1.OpenShell`: missing here
  (MISSING_RPC, informational), or declared under the same full name with a
  different request, response or streaming (CONFLICT);
- every call this project declares in `openshell.v1.OpenShell` that upstream
  does not (EXTRA_RPC: it belongs in a service of this project's own);
- every message and enum reachable, in upstream's descriptors, from the request
  and response of the calls both sides declare, when this project declares the
  same full name: a field number both use must agree on name, type (with the
  message or enum type's full name), label and oneof; an enum value number both
  use must have the same name (CONFLICT). A field or enum value this project
  adds, numbered below 1000, may collide with a later upstream field
  (LOW_EXTENSION).

Findings are ratcheted against `proto/upstream-contract-known.txt`: a finding
not listed there fails the check; a listed one that disappeared is reported as
fixed. `--update` rewrites the list, `--report` prints every finding by kind.

Run through scripts/upstream-contract.sh, which provides the pinned packages.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.metadata
import os
import pkgutil
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool

UPSTREAM_PACKAGE = "openshell"
UPSTREAM_VERSION = "0.1.5"
SERVICE = "openshell.v1.OpenShell"
# Field numbers (and enum values) this project adds start here, clear of the
# numbers upstream hands out next.
EXTENSION_FLOOR = 1000
KINDS = ("CONFLICT", "LOW_EXTENSION", "EXTRA_RPC", "MISSING_RPC")

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
PROTO_GLOBS = ("openshell/v1/*.proto", "openshell/sandbox/v1/*.proto", "openshell/datamodel/v1/*.proto")
KNOWN_FILE = PROTO_ROOT / "upstream-contract-known.txt"

FDP = descriptor_pb2.FieldDescriptorProto
SCALAR_NAMES = {
    FDP.TYPE_DOUBLE: "double",
    FDP.TYPE_FLOAT: "float",
    FDP.TYPE_INT64: "int64",
    FDP.TYPE_UINT64: "uint64",
    FDP.TYPE_INT32: "int32",
    FDP.TYPE_FIXED64: "fixed64",
    FDP.TYPE_FIXED32: "fixed32",
    FDP.TYPE_BOOL: "bool",
    FDP.TYPE_STRING: "string",
    FDP.TYPE_BYTES: "bytes",
    FDP.TYPE_UINT32: "uint32",
    FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64",
    FDP.TYPE_SINT32: "sint32",
    FDP.TYPE_SINT64: "sint64",
}


class Contract:
    """An index of one side's descriptors by full name (no leading dot)."""

    def __init__(self, label: str, files: list[descriptor_pb2.FileDescriptorProto]):
        self.label = label
        self.files = files
        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}
        self.services: dict[str, descriptor_pb2.ServiceDescriptorProto] = {}
        for file in files:
            prefix = file.package + "." if file.package else ""
            for service in file.service:
                self.services[prefix + service.name] = service
            for enum in file.enum_type:
                self.enums[prefix + enum.name] = enum
            for message in file.message_type:
                self._add_message(prefix + message.name, message)
        # A pool over the same files: fails loudly on a set that does not link.
        pool = descriptor_pool.DescriptorPool()
        for file in files:
            pool.Add(file)
        self.pool = pool

    def _add_message(self, name: str, message: descriptor_pb2.DescriptorProto) -> None:
        self.messages[name] = message
        for enum in message.enum_type:
            self.enums[f"{name}.{enum.name}"] = enum
        for nested in message.nested_type:
            self._add_message(f"{name}.{nested.name}", nested)

    def methods(self, service: str) -> dict[str, descriptor_pb2.MethodDescriptorProto]:
        found = self.services.get(service)
        return {m.name: m for m in found.method} if found else {}


def in_dependency_order(files: dict[str, descriptor_pb2.FileDescriptorProto]):
    """The files ordered so that each comes after the files it imports."""
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for dependency in files[name].dependency:
            visit(dependency)
        ordered.append(files[name])

    for name in sorted(files):
        visit(name)
    return ordered


def load_upstream() -> Contract:
    """Upstream's descriptors, as the installed package's `_pb2` modules embed them."""
    installed = importlib.metadata.version(UPSTREAM_PACKAGE)
    if installed != UPSTREAM_VERSION:
        sys.exit(f"upstream contract: {UPSTREAM_PACKAGE} {installed} is installed, "
                 f"the check is written against {UPSTREAM_VERSION}")
    stubs = importlib.import_module(f"{UPSTREAM_PACKAGE}._proto")
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def collect(descriptor) -> None:
        if descriptor.name in files:
            return
        files[descriptor.name] = descriptor_pb2.FileDescriptorProto.FromString(
            descriptor.serialized_pb)
        for dependency in descriptor.dependencies:
            collect(dependency)

    modules = [m.name for m in pkgutil.iter_modules(stubs.__path__) if m.name.endswith("_pb2")]
    if not modules:
        sys.exit(f"upstream contract: no _pb2 modules under {stubs.__path__}")
    for name in sorted(modules):
        module = importlib.import_module(f"{stubs.__name__}.{name}")
        collect(module.DESCRIPTOR)
    return Contract(f"{UPSTREAM_PACKAGE} {UPSTREAM_VERSION}", in_dependency_order(files))


def load_ours(proto_root: Path) -> Contract:
    """This project's `.proto` files, compiled by grpc_tools' protoc."""
    from grpc_tools import protoc

    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    sources = sorted(
        str(path.relative_to(proto_root)) for pattern in PROTO_GLOBS for path in proto_root.glob(pattern))
    if not sources:
        sys.exit(f"upstream contract: no .proto files under {proto_root}")
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "ours.binpb"
        cwd = os.getcwd()
        os.chdir(proto_root)
        try:
            status = protoc.main([
                "protoc", "-I.", f"-I{well_known}", "--include_imports",
                f"--descriptor_set_out={out}", *sources,
            ])
        finally:
            os.chdir(cwd)
        if status != 0:
            sys.exit(f"upstream contract: protoc failed ({status}) on {', '.join(sources)}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return Contract("this project", list(fds.file))


def type_text(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.type in (FDP.TYPE_MESSAGE, FDP.TYPE_GROUP):
        return "message " + field.type_name.lstrip(".")
    if field.type == FDP.TYPE_ENUM:
        return "enum " + field.type_name.lstrip(".")
    return SCALAR_NAMES[field.type]


def oneof_of(message: descriptor_pb2.DescriptorProto, field: descriptor_pb2.FieldDescriptorProto):
    """The real oneof a field belongs to; proto3 `optional` (a synthetic oneof) is none."""
    if field.HasField("oneof_index") and not field.proto3_optional:
        return message.oneof_decl[field.oneof_index].name
    return None


def field_text(message: descriptor_pb2.DescriptorProto, field: descriptor_pb2.FieldDescriptorProto) -> str:
    text = type_text(field) + " " + field.name
    if field.label == FDP.LABEL_REPEATED:
        text = "repeated " + text
    oneof = oneof_of(message, field)
    if oneof:
        text += f" (oneof {oneof})"
    return text


def field_shape(message, field):
    return (field.name, type_text(field), field.label == FDP.LABEL_REPEATED, oneof_of(message, field))


def method_text(method: descriptor_pb2.MethodDescriptorProto) -> str:
    request = ("stream " if method.client_streaming else "") + method.input_type.lstrip(".")
    response = ("stream " if method.server_streaming else "") + method.output_type.lstrip(".")
    return f"({request})->({response})"


def reachable(upstream: Contract, roots: list[str]) -> tuple[list[str], list[str]]:
    """Messages and enums reachable from `roots` through upstream's fields."""
    messages: set[str] = set()
    enums: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in messages or name not in upstream.messages:
            continue
        messages.add(name)
        for field in upstream.messages[name].field:
            target = field.type_name.lstrip(".")
            if field.type in (FDP.TYPE_MESSAGE, FDP.TYPE_GROUP):
                pending.append(target)
            elif field.type == FDP.TYPE_ENUM:
                enums.add(target)
    return sorted(messages), sorted(enums)


def is_well_known(name: str) -> bool:
    return name.startswith("google.protobuf.")


def compare(upstream: Contract, ours: Contract):
    findings: list[str] = []
    info: dict[str, list[str]] = collections.defaultdict(list)

    upstream_methods = upstream.methods(SERVICE)
    if not upstream_methods:
        sys.exit(f"upstream contract: upstream declares no service {SERVICE}")
    our_methods = ours.methods(SERVICE)
    # Where else this project declares a call of the same name (another service).
    elsewhere = {
        method.name: f"{service}/{method.name}"
        for service, declared in ours.services.items() if service != SERVICE
        for method in declared.method
    }

    roots: list[str] = []
    for name, method in upstream_methods.items():
        mine = our_methods.get(name)
        if mine is None:
            note = f" (ours: {elsewhere[name]})" if name in elsewhere else ""
            findings.append(f"MISSING_RPC {SERVICE}/{name}{note}")
            # A call this project serves in a service of its own still shares
            # its messages' full names with upstream: compare them too.
            if name in elsewhere:
                roots += [method.input_type.lstrip("."), method.output_type.lstrip(".")]
            continue
        roots += [method.input_type.lstrip("."), method.output_type.lstrip(".")]
        if method_text(mine) != method_text(method):
            findings.append(
                f"CONFLICT {SERVICE}/{name} ours={method_text(mine)} upstream={method_text(method)}")
    for name in our_methods:
        if name not in upstream_methods:
            findings.append(f"EXTRA_RPC {SERVICE}/{name}")

    messages, enums = reachable(upstream, roots)
    # An enum is one type wherever it is used: every enum both sides declare
    # under the same full name is compared, reachable or not.
    enums = sorted(set(enums) | (set(upstream.enums) & set(ours.enums)))
    for name in messages:
        if is_well_known(name):
            continue
        theirs_msg = upstream.messages[name]
        mine_msg = ours.messages.get(name)
        if mine_msg is None:
            info["upstream messages reachable but not declared here (not compared)"].append(name)
            continue
        info["messages compared"].append(name)
        theirs_fields = {f.number: f for f in theirs_msg.field}
        mine_fields = {f.number: f for f in mine_msg.field}
        for number in sorted(set(theirs_fields) & set(mine_fields)):
            theirs, mine = theirs_fields[number], mine_fields[number]
            if field_shape(mine_msg, mine) != field_shape(theirs_msg, theirs):
                findings.append(
                    f"CONFLICT {name}.{number} ours={field_text(mine_msg, mine)} "
                    f"upstream={field_text(theirs_msg, theirs)}")
        for number in sorted(set(mine_fields) - set(theirs_fields)):
            if number < EXTENSION_FLOOR:
                findings.append(
                    f"LOW_EXTENSION {name}.{number} ours={field_text(mine_msg, mine_fields[number])}")

    for name in enums:
        if is_well_known(name):
            continue
        mine_enum = ours.enums.get(name)
        if mine_enum is None:
            info["upstream enums reachable but not declared here (not compared)"].append(name)
            continue
        info["enums compared"].append(name)
        theirs_values = collections.defaultdict(set)
        for value in upstream.enums[name].value:
            theirs_values[value.number].add(value.name)
        mine_values = collections.defaultdict(set)
        for value in mine_enum.value:
            mine_values[value.number].add(value.name)
        for number in sorted(set(theirs_values) & set(mine_values)):
            if mine_values[number] != theirs_values[number]:
                findings.append(
                    f"CONFLICT {name}.{number} ours=enum value {'|'.join(sorted(mine_values[number]))} "
                    f"upstream=enum value {'|'.join(sorted(theirs_values[number]))}")
        for number in sorted(set(mine_values) - set(theirs_values)):
            if number < EXTENSION_FLOOR:
                findings.append(
                    f"LOW_EXTENSION {name}.{number} ours=enum value {'|'.join(sorted(mine_values[number]))}")

    return sorted(set(findings)), info


def read_known(path: Path) -> list[str]:
    if not path.exists():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def write_known(path: Path, findings: list[str]) -> None:
    header = [
        f"# Differences between this project's gRPC contract and upstream OpenShell {UPSTREAM_VERSION}",
        "# (PyPI package `openshell`), found by scripts/upstream-contract.sh. The check fails",
        "# on a finding not listed here; rewrite the list with",
        "# `bash scripts/upstream-contract.sh --update` once a finding is fixed or accepted.",
        "# Kinds are explained in docs/protocol.md.",
    ]
    path.write_text("\n".join(header + findings) + "\n", encoding="utf-8")


def kind_of(finding: str) -> str:
    return finding.split(" ", 1)[0]


def counts(findings) -> str:
    by_kind = collections.Counter(kind_of(f) for f in findings)
    return ", ".join(f"{kind} {by_kind[kind]}" for kind in KINDS if by_kind[kind]) or "none"


def shown(path: Path) -> str:
    """A path as the repository knows it, when it is inside the repository."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true",
                        help=f"rewrite {KNOWN_FILE.relative_to(REPO)} with today's findings")
    parser.add_argument("--report", action="store_true",
                        help="print every finding, grouped by kind, with counts")
    parser.add_argument("--known", type=Path, default=KNOWN_FILE,
                        help="the known-findings file (default: %(default)s)")
    parser.add_argument("--proto-root", type=Path, default=PROTO_ROOT,
                        help="where this project's .proto files live (default: %(default)s)")
    args = parser.parse_args()

    upstream = load_upstream()
    ours = load_ours(args.proto_root.resolve())
    findings, info = compare(upstream, ours)

    if args.report:
        for kind in KINDS:
            of_kind = [f for f in findings if kind_of(f) == kind]
            print(f"== {kind}: {len(of_kind)}")
            for finding in of_kind:
                print(f"  {finding}")
        for title, names in sorted(info.items()):
            print(f"== {title}: {len(names)}")
            if "not compared" in title:
                for name in names:
                    print(f"  {name}")
        print()

    if args.update:
        write_known(args.known, findings)
        print(f"upstream contract: wrote {len(findings)} findings ({counts(findings)}) to {shown(args.known)}")
        return 0

    known = set(read_known(args.known))
    new = [f for f in findings if f not in known]
    fixed = sorted(known - set(findings))
    for finding in fixed:
        print(f"fixed; remove it with --update: {finding}")
    for finding in new:
        print(f"NEW {finding}")
    remaining = [f for f in findings if f in known]
    print(f"upstream contract (openshell {UPSTREAM_VERSION}): {len(remaining)} known findings remain "
          f"({counts(remaining)}); {len(new)} new, {len(fixed)} fixed")
    if new:
        print(f"upstream contract: {len(new)} finding(s) not in {shown(args.known)}: fix the .proto "
              "change, or (for an accepted difference) record it with --update", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
