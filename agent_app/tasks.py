"""agent_app's tasks live with what they serve: the session life cycle in agent_app.lifecycle
(sessions.end_write, episodes.write, sessions.close_idle, sessions.cleanup_empty), the learning
from imported history in agent_app.history_import (memory.import_upload,
memory.import_learn_next), the vectors memory search compares in agent_app.vectors
(memory.vectors_write, memory.vectors_catch_up). The Lark channel's are the doors'
(channels_app.tasks).

Celery's autodiscovery imports `<app>.tasks` of each installed app and nothing else, so a
worker registers those tasks through the imports below. Import the tasks from their own
modules, not from here.
"""

from agent_app import history_import, lifecycle, vectors  # noqa: F401
