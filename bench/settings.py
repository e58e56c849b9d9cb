"""Settings for the HTTP benchmarks: the product's, plus bench-only URLs (bench/urls.py).

DJANGO_SETTINGS_MODULE=bench.settings gunicorn ethan_site.wsgi:application
"""

from ethan_site.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
