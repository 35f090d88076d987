"""``babelstream schemas export``: write the JSON Schema files of the wire contract."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.contract.messages import MESSAGE_TYPES, SCHEMA_VERSION, dump_schema
from pipeline.settings import PROJECT_ROOT


def schema_path(directory: Path, name: str, version: int = SCHEMA_VERSION) -> Path:
    """Where the schema of message ``name`` at ``version`` lives."""
    return directory / f"{name}.v{version}.schema.json"


@click.group()
def schemas() -> None:
    """The language-neutral wire contract (JSON Schema)."""


@schemas.command("export")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path),
    default=PROJECT_ROOT / "schemas",
    show_default=True,
    help="Where the JSON Schema files are written.",
)
def export(directory: Path) -> None:
    """Write one JSON Schema file per message type."""
    directory.mkdir(parents=True, exist_ok=True)
    for model in MESSAGE_TYPES:
        path = schema_path(directory, model.schema_name, model.wire_version)
        path.write_text(dump_schema(model), encoding="utf-8")
        click.echo(path)
