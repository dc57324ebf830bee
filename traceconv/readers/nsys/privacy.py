"""The profiled process's command line and environment, only when the user asks for them.

An export carries the full environment (``META_DATA_CAPTURE``, ``TARGET_INFO_SYSTEM_ENV``),
tokens and passwords included. By default none of it is read. With
``include_environment=True`` it goes into the trace metadata, with the values of variables
named like credentials, and arguments that follow credential-like flags, replaced by
``REDACTED``.
"""

from __future__ import annotations

import re
from typing import Any

from traceconv.readers.nsys.sql import Database

REDACTED = "REDACTED"
CAPTURE = "META_DATA_CAPTURE"
SYSTEM = "TARGET_INFO_SYSTEM_ENV"
CREDENTIAL = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|PASS\b|_PASS|KEY|AUTH|CREDENTIAL|COOKIE|SESSION|PRIVATE|"
    r"SIGNATURE|CERT_?PASS|ACCESS_?ID|WEBHOOK|DSN|CONN(ECTION)?_?STR",
    re.IGNORECASE,
)
# Values that are credentials whatever their variable is called.
SECRET_VALUE = re.compile(r"^(ghp_|gho_|github_pat_|hf_|sk-|xox[abp]-|AKIA|ASIA|glpat-|eyJ)[\w\-.]{8,}")
URL_PASSWORD = re.compile(r"(\w+://[^/\s:@]+:)([^@\s/]+)(@)")
_ENV_ROW = re.compile(r"^(PROCESS_\d+):ENVIRONMENT_VARIABLE$")
_ARG_ROW = re.compile(r"^(PROCESS_\d+):ARGUMENT_(\d+)$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_QUOTED = re.compile(r'^([^=]+)="?(.*?)"?$', re.DOTALL)


def is_credential(name: str) -> bool:
    return CREDENTIAL.search(name) is not None


def redact_value(name: str, value: str) -> str:
    if is_credential(name) or SECRET_VALUE.match(value):
        return REDACTED
    return URL_PASSWORD.sub(rf"\g<1>{REDACTED}\g<3>", value)


def redact_arguments(args: list[str]) -> list[str]:
    """``--token X``, ``--token=X``, ``TOKEN=X`` and bare secret-looking values -> REDACTED."""
    out: list[str] = []
    after_flag = False
    for arg in args:
        if after_flag:
            out.append(REDACTED)
            after_flag = False
            continue
        key, eq, _value = arg.partition("=")
        if eq and is_credential(key):
            out.append(f"{key}={REDACTED}")
        elif arg.startswith("-") and is_credential(arg):
            out.append(arg)
            after_flag = True
        else:
            out.append(redact_value("", arg))
    return out


def environment(db: Database) -> dict[str, Any]:
    """The capture settings, command lines, environments and system facts, redacted."""
    result: dict[str, Any] = {}
    if {"name", "value"} <= set(db.columns(CAPTURE)):
        result["capture"] = _capture(db.rows(CAPTURE, f"SELECT name, value FROM [{CAPTURE}]"))
    if {"name", "value"} <= set(db.columns(SYSTEM)):
        system: dict[str, Any] = {}
        for name, value in db.rows(SYSTEM, f"SELECT name, value FROM [{SYSTEM}]"):
            if name == "DeviceEnvironment" and isinstance(value, str):
                system[name] = _env_block(value.split("\x00" if "\x00" in value else ";"))  # NUL: 2022.4
            else:
                system[str(name)] = redact_value(str(name), str(value)) if value is not None else None
        result["system"] = system
    return result


def _capture(rows: list[tuple[Any, Any]]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    processes: dict[str, dict[str, Any]] = {}
    arguments: dict[str, list[tuple[int, str]]] = {}
    for name, value in rows:
        name, value = str(name), "" if value is None else str(value)
        env, arg = _ENV_ROW.match(name), _ARG_ROW.match(name)
        if env:
            m = _QUOTED.match(value)
            var, val = (m.group(1), m.group(2)) if m else (value, "")
            processes.setdefault(env.group(1), {}).setdefault("environment", {})[var] = redact_value(var, val)
        elif arg:
            arguments.setdefault(arg.group(1), []).append((int(arg.group(2)), value))
        elif name in settings:
            prev = settings[name]
            settings[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
        else:
            settings[name] = redact_value(name, value)
    for proc, numbered in arguments.items():
        processes.setdefault(proc, {})["arguments"] = redact_arguments([v for _, v in sorted(numbered)])
    return {"settings": settings, "processes": processes}


def _env_block(items: list[str]) -> dict[str, str]:
    """``A=1;B=x;y`` -> {A: 1, B: "x;y"}: a piece that does not start a variable continues the last value."""
    raw: dict[str, str] = {}
    last: str | None = None
    for item in items:
        var, eq, val = item.partition("=")
        if eq and _IDENT.match(var):
            raw[var] = val
            last = var
        elif last is not None:
            raw[last] += ";" + item
    return {var: redact_value(var, val) for var, val in raw.items()}
