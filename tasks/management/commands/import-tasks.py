# `facet import-tasks PATH`: Django names commands after their module, and the module with the
# code, import_tasks, cannot carry a hyphen as a Python name.
from tasks.management.commands.import_tasks import Command  # noqa: F401
