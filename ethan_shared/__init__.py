"""The shared floor: infrastructure every layer may use, importing none of them: the task queue
(queue), size limits (limits), the ~/.ethan file layout's helpers (layout, private), config.yaml
(config), the API's token authentication and errors (api), throttles, worker threads and pooled
connections. ethan_site above is the wiring (settings, urls, asgi, celery) that imports the apps."""
