#!/usr/bin/env python
"""Django's command-line utility for Tomori."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings")
    from tomori.startup import exit_on_settings_error

    exit_on_settings_error()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
