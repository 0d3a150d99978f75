"""Render the gateway config from its template and the environment, then serve it.

    python render_config.py TEMPLATE OUTPUT [sluicegate serve arguments...]

``${NAME}`` in TEMPLATE is replaced by the environment variable NAME (``$$`` is a literal
``$``, and a ``$`` not followed by ``{`` stays as it is); a NAME that is not set is an error,
so a missing value stops the container instead of serving a half-written config. Standard
library only: it runs in the gateway image as is.
"""

from __future__ import annotations

import os
import string
import sys
from pathlib import Path


class _Braced(string.Template):
    """Only ``${NAME}`` and ``$$``: a shell example such as ``"$KEY"`` in a comment stays."""

    pattern = (
        r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}"
        r"|(?P<named>(?!))|(?P<invalid>(?!)))"
    )


def render(template: str, env: dict[str, str]) -> str:
    try:
        return _Braced(template).substitute(env)
    except KeyError as exc:
        raise SystemExit(
            f"render_config: {exc.args[0]} is not set (see deploy/compose/.env)"
        ) from None


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    template, output, serve_args = argv[0], argv[1], argv[2:]
    Path(output).write_text(render(Path(template).read_text(), dict(os.environ)))
    os.execvp("sluicegate", ["sluicegate", "serve", "--config", output, *serve_args])


if __name__ == "__main__":
    main(sys.argv[1:])
