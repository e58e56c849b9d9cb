"""For ethan_site.wsgi under gunicorn: the synchronous server that `make serve` ran before the
ASGI one, kept as the benchmarks' baseline (bench.concurrent_streams passes --config
gunicorn.conf.py). `make serve`, docker compose and the image run `ethan serve` instead
(ethan_site.serve: uvicorn), which does not read this file.

The settings are loaded once in the master before any worker starts: a bad value stops
gunicorn with one line naming the variable, instead of workers failing to boot in a loop.
"""

wsgi_app = "ethan_site.wsgi:application"

# The access log (`--access-logfile -` on the command line): each request's path
# without its query string (%(U)s, not %(r)s), for queries hold what people search for
# (ethan_site.access_log). No referer either: it is the previous page's URL, query and all.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s %(M)sms "%(a)s"'


def on_starting(server) -> None:
    import os

    from ethan_shared.config import settings_or_exit

    # The workers share the throttles' counts only if the settings know there are several
    # (one process counts in its own memory), as `ethan serve --workers` tells them.
    os.environ.setdefault("ETHAN_SERVE_PROCESSES", str(server.cfg.workers))
    settings_or_exit("gunicorn")
