#!/usr/bin/env python
"""Django's command-line utility for Tomori."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")
    from caches.process_identity import kind_of_command, set_kind
    from tomori.startup import exit_on_settings_error

    set_kind(kind_of_command(sys.argv))  # the origin of what this process writes

    exit_on_settings_error()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
