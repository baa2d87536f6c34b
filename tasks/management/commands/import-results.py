# `facet import-results PATH`: Django names commands after their module, and the module with the
# code, import_results, cannot carry a hyphen as a Python name.
from tasks.management.commands.import_results import Command  # noqa: F401
