"""The doors' tasks live with their door: the Lark channel's in channels_app.lark.tasks
(channels.lark_event, channels.lark_dispatch, channels.lark_reclaim).

Celery's autodiscovery imports `<app>.tasks` of each installed app and nothing else, so a
worker registers those tasks through the import below.
"""

from channels_app.lark import tasks as lark_tasks  # noqa: F401
