"""`python -m profiles.migrate FILE... [--check]`: rewrite Profiles of an older schema as the current one.

Each file is read as `profiles.schema.migrate` reads it (what was filled in is printed), checked, and
written back atomically; a file already current is left as it is. `--check` writes nothing and exits
1 when a file would change (for CI). Bad input: one line, exit 2, nothing written.
"""
from __future__ import annotations

import sys
from pathlib import Path

from common.cli import CliParser, cli_entry
from profiles import schema
from profiles.profile import Profile


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m profiles.migrate", description=__doc__.split("\n\n")[1])
    parser.add_argument("files", metavar="FILE", nargs="+", type=Path, help="Profile JSON files")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is not current")
    args = parser.parse_args(argv)
    raws = {path: schema.read(path) for path in args.files}
    stale = []
    for path, raw in raws.items():
        if not isinstance(raw, dict) or raw.get("schema_version") == schema.SCHEMA_VERSION:
            Profile.from_dict(raw, source=str(path))     # checked all the same
            continue
        migrated, notes = schema.migrate(raw, str(path))
        profile = Profile.from_dict(migrated, source=str(path))
        stale.append(path)
        if not args.check:
            profile.save(path)
        print(f"{path}: schema {raw.get('schema_version')} -> {schema.SCHEMA_VERSION}"
              f"{'' if args.check else ', rewritten'} ({'; '.join(notes)})")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
