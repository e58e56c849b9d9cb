#!/usr/bin/env python
"""Django's command-line utility for Ethan."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")
    from django.core.management import execute_from_command_line

    from ethan_shared.config import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        # A broken config.yaml or a refused setting: one readable line, no traceback.
        sys.stderr.write(f"ethan: configuration error: {exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
