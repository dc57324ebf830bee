"""No environment value of any export reaches the output, unless asked for; credentials never.

The environment of the profiled process is found here independently of the reader: in
META_DATA_CAPTURE (``NAME="value"`` rows and the command line), in TARGET_INFO_SYSTEM_ENV's
DeviceEnvironment (``A=1;B=2``) and in StringIds' NUL-separated environment blocks.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import traceconv
from traceconv.cli import main
from traceconv.readers.nsys.privacy import REDACTED, redact_arguments, redact_value

from .conftest import fixture, real_files

EXPORTS = real_files("nsys", ("*.sqlite",))
CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|AUTH|CREDENTIAL|COOKIE|SESSION", re.IGNORECASE)
MIN_LEN = 7  # shorter values ("1", "true", "x86_64") occur in any output by chance


def _environment(path: Path) -> dict[str, set[str]]:
    """Variable name -> values, plus "<argv>" -> command-line arguments, read with plain sqlite3."""
    env: dict[str, set[str]] = {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "META_DATA_CAPTURE" in tables:
        for name, value in db.execute("SELECT name, value FROM META_DATA_CAPTURE"):
            if name.endswith(":ENVIRONMENT_VARIABLE"):
                var, _, val = value.partition("=")
                env.setdefault(var, set()).add(val.strip('"'))
            elif ":ARGUMENT_" in name or name.endswith(":COMMAND"):
                env.setdefault("<argv>", set()).add(value)
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        for (value,) in db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'"):
            for item in re.split("[;\x00]", value):
                var, eq, val = item.partition("=")
                if eq:
                    env.setdefault(var, set()).add(val)
    if "StringIds" in tables:
        for (value,) in db.execute("SELECT value FROM StringIds WHERE value LIKE '%=%' || char(0) || '%'"):
            for item in value.split("\x00"):
                var, eq, val = item.partition("=")
                if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                    env.setdefault(var, set()).add(val)
    db.close()
    return env


def _names(path: Path) -> set[str]:
    """Process and thread names: the export's names of its processes, which the output rightly holds
    (a command `python3` is also the name of the process `python3`)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    names = {r[0] for r in db.execute("SELECT name FROM PROCESSES")} if "PROCESSES" in tables else set()
    if {"ThreadNames", "StringIds"} <= tables:
        names |= {r[0] for r in db.execute("SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")}
    db.close()
    return names


def _messages(path: Path) -> list[str]:
    """Nsight Systems' own diagnostic messages, which the output holds as written: a Windows export's
    "Loaded CUPTI library: C:\\Program Files\\NVIDIA Corporation\\..." holds the value of ProgramFiles."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    texts = [r[0] for r in db.execute("SELECT text FROM DIAGNOSTIC_EVENT")] if "DIAGNOSTIC_EVENT" in tables else []
    db.close()
    return [t for t in texts if t]


def _own_words(path: Path) -> str:
    """What traceconv itself writes: column names, metadata keys, notes, the input's path and the nsys
    version (an environment may name it too: EBVERSIONNSIGHTMINSYSTEMS=2022.2.1)."""
    meta = pq.read_metadata(path).metadata
    stats, trace = json.loads(meta[b"traceconv.stats"]), json.loads(meta[b"traceconv.trace"])
    keys = [k for d in (stats, trace, *trace.get("gpus", [])) for k in d]
    return "\n".join(
        [
            *pq.read_schema(path).names,
            *keys,
            *stats["notes"],
            stats["input"],
            stats["trace_id"],
            str(trace.get("nsys_version")),
        ]
    )


def _texts(path: Path) -> list[str]:
    """Every string a Parquet file holds once decoded: cells of string columns and the metadata."""
    table = pq.read_table(path)
    out = [v.decode(errors="replace") for v in (table.schema.metadata or {}).values()]
    for col in table.columns:
        typ = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if pa.types.is_string(typ):
            out += [v for v in col.cast(pa.string()).unique().to_pylist() if v is not None]
    return out


def _leaks(path: Path, values: set[str], source: Path) -> set[str]:
    raw = path.read_bytes()
    texts = "\n".join(_texts(path))
    allowed = _names(source)
    own = _own_words(path)
    return {
        v
        for v in values
        if len(v) >= MIN_LEN and v not in allowed and v not in own and (v.encode() in raw or v in texts)
    }


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name[:45])
def test_no_environment_value_reaches_the_output(path: Path, tmp_path: Path) -> None:
    env = _environment(path)
    values = {v for vals in env.values() for v in vals}
    out = tmp_path / "out.parquet"
    traceconv.convert(path, out)
    messages = _messages(path)
    assert not {v for v in _leaks(out, values, path) if not any(v in m for m in messages)}
    assert "environment" not in json.loads(pq.read_metadata(out).metadata[b"traceconv.trace"])
    # With the opt-in, the environment is there, and no value of a credential-named variable
    # (not even in a diagnostic message).
    traceconv.convert(path, out, include_environment=True)
    secrets = {v for var, vals in env.items() if CREDENTIAL_NAME.search(var) for v in vals if v != REDACTED}
    assert not _leaks(out, secrets, path)


def test_some_exports_really_carry_an_environment() -> None:
    """The test above is not vacuous: the corpus holds environments, and StringIds copies of them."""
    env = _environment(fixture("nsys/h200/fixed.sqlite"))
    assert len(env) > 40 and "PATH" in env
    assert any(len(v) >= MIN_LEN for vals in env.values() for v in vals)


@pytest.fixture
def secret_export(tmp_path: Path) -> Path:
    """Hand-made: fixed.sqlite with credentials planted where nsys puts the environment (the corpus had
    its real ones replaced by REDACTED before it was shared)."""
    path = tmp_path / "secrets.sqlite"
    shutil.copy(fixture("nsys/h200/fixed.sqlite"), path)
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)",
            [
                ("PROCESS_0:ENVIRONMENT_VARIABLE", 'HF_TOKEN="hf_plantedSecret0001"'),
                ("PROCESS_0:ENVIRONMENT_VARIABLE", 'DB_PASSWORD="plantedSecret0002"'),
                ("PROCESS_0:ENVIRONMENT_VARIABLE", 'PROXY="http://user:plantedSecret0003@proxy:8080"'),
                ("PROCESS_0:ARGUMENT_3", "--api-key"),
                ("PROCESS_0:ARGUMENT_4", "plantedSecret0004"),
            ],
        )
        db.execute(
            "UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ';AWS_SECRET_ACCESS_KEY=plantedSecret0005;"
            "GITHUB_TOKEN=plantedSecret0006' WHERE name = 'DeviceEnvironment'"
        )
    return path


def test_opt_in_includes_the_environment_with_credentials_redacted(secret_export: Path, tmp_path: Path) -> None:
    planted = {f"plantedSecret000{i}" for i in range(1, 7)}
    out = tmp_path / "with.parquet"
    result = CliRunner().invoke(main, ["nsys", str(secret_export), "-o", str(out), "--include-environment"])
    assert result.exit_code == 0, result.output
    assert not {p for p in planted if any(p in t for t in _texts(out)) or p.encode() in out.read_bytes()}
    env = json.loads(pq.read_metadata(out).metadata[b"traceconv.trace"])["environment"]
    process = env["capture"]["processes"]["PROCESS_0"]
    assert process["environment"]["HF_TOKEN"] == REDACTED and process["environment"]["DB_PASSWORD"] == REDACTED
    assert process["environment"]["PROXY"] == "http://user:REDACTED@proxy:8080"
    assert process["environment"]["CUDA_HOME"] == "/usr/local/cuda"  # the rest is there, as asked
    assert process["arguments"][-2:] == ["--api-key", REDACTED]
    system = env["system"]["DeviceEnvironment"]
    assert system["AWS_SECRET_ACCESS_KEY"] == REDACTED and system["GITHUB_TOKEN"] == REDACTED
    without = tmp_path / "without.parquet"
    assert CliRunner().invoke(main, ["nsys", str(secret_export), "-o", str(without)]).exit_code == 0
    texts = "\n".join(_texts(without))
    assert not {p for p in planted if p in texts} and "/usr/local/cuda" not in texts


def test_redaction_rules() -> None:
    assert redact_value("MY_API_KEY", "abc") == REDACTED
    assert redact_value("HOME", "/root") == "/root"
    assert redact_value("ANYTHING", "ghp_0123456789abcdefghij") == REDACTED
    assert redact_arguments(["train.py", "--password=hunter22", "--token", "t0k3n", "--lr", "3e-4"]) == [
        "train.py",
        f"--password={REDACTED}",
        "--token",
        REDACTED,
        "--lr",
        "3e-4",
    ]
