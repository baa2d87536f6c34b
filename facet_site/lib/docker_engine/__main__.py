"""Runs the engine command line (cli.py) for `python -m facet_site.lib.docker_engine`."""
import sys

from facet_site.lib.docker_engine.cli import main

sys.exit(main())
