"""gunicorn reads this file from the working directory (`make serve`, docker-compose's web).

The settings are loaded once in the master before any worker starts: a bad value stops
gunicorn with one line naming the variable, instead of workers failing to boot in a loop.
"""

wsgi_app = "ethan_site.wsgi:application"


def on_starting(server) -> None:
    from ethan_site.config import settings_or_exit

    settings_or_exit("gunicorn")
