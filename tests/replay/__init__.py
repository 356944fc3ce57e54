"""Replay tests: a package, so this conftest is not importable as a bare ``conftest`` that shadows the root one."""
