#!/usr/bin/env python3
"""Rewrites the Cargo.toml of a crate taken from git (not from crates.io) the
way `cargo publish` normalizes a manifest, so that it can sit in a cargo
directory source beside Debian's crates:

- [workspace], package.workspace, [patch], [replace], [profile.*], [badges]
  go: a crate inside a directory source is not a workspace root;
- [dev-dependencies] (target-specific ones too), [[bench]], [[test]] and
  [[example]] go: never built for a dependency, and their crates (criterion,
  ...) are not in Debian;
- `path = ...` goes from dependencies, `version` stays: nwind's
  `proc-maps = { version = "0.1", path = "../proc-maps" }` then resolves to
  the vendored proc-maps 0.1.0 like any other crate.

usage: normalize_manifest.py CARGO_TOML   (rewritten in place)
"""
import json
import sys
import tomllib

DROP_TOP = ('workspace', 'dev-dependencies', 'dev_dependencies', 'bench', 'test', 'example',
            'badges', 'profile', 'patch', 'replace')
DEP_TABLES = ('dependencies', 'build-dependencies', 'build_dependencies')


def drop_paths(manifest, table):
    for name, spec in table.items():
        if isinstance(spec, dict) and 'path' in spec:
            del spec['path']
            if 'version' not in spec and 'git' not in spec:
                sys.exit(f'{manifest}: path dependency {name} has no version')


def value(v):
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return '[' + ', '.join(value(x) for x in v) + ']'
    if isinstance(v, dict):
        return '{' + ', '.join(json.dumps(k, ensure_ascii=False) + ' = ' + value(x) for k, x in v.items()) + '}'
    raise TypeError(v)


def emit(out, path, table, inline_children):
    """TOML out of the parsed table: dependency and feature tables inline."""
    scalars = {k: v for k, v in table.items() if inline_children or not isinstance(v, dict)}
    if path:
        out.append('[' + '.'.join(json.dumps(p, ensure_ascii=False) for p in path) + ']')
    out.extend(json.dumps(k, ensure_ascii=False) + ' = ' + value(v) for k, v in scalars.items())
    out.append('')
    for k, v in table.items():
        if k not in scalars:
            emit(out, path + [k], v, k in DEP_TABLES or k == 'features')


def main(manifest):
    with open(manifest, 'rb') as f:
        doc = tomllib.load(f)
    for k in DROP_TOP:
        doc.pop(k, None)
    doc.get('package', {}).pop('workspace', None)
    for k in DEP_TABLES:
        drop_paths(manifest, doc.get(k, {}))
    for spec in doc.get('target', {}).values():
        for k in ('dev-dependencies', 'dev_dependencies'):
            spec.pop(k, None)
        for k in DEP_TABLES:
            drop_paths(manifest, spec.get(k, {}))
    out = []
    emit(out, [], doc, False)
    with open(manifest, 'w') as f:
        f.write('\n'.join(out))


if __name__ == '__main__':
    main(sys.argv[1])
