#!/usr/bin/env python
"""Django's command-line utility for administrative tasks (the same commands as `facet`)."""
import sys

from facet_site.cli import main

if __name__ == "__main__":
    sys.exit(main())
