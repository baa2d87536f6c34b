"""The `facet` console script: Django's management commands under our own name."""
import os
import sys


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "facet_site.settings")
    from django.core.management import execute_from_command_line

    argv = list(sys.argv if argv is None else argv)
    argv[0] = "facet"
    execute_from_command_line(argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
