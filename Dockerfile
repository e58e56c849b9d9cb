# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=ethan_site.settings \
    ETHAN_HOME=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY ethan_site ethan_site
COPY sessions_app sessions_app
COPY memory_app memory_app
COPY profile_app profile_app
COPY episodes_app episodes_app
COPY agent_app agent_app
COPY channels_app channels_app
COPY oauth_app oauth_app
COPY ethan_llm ethan_llm
COPY ethan_shared ethan_shared
COPY embedder embedder
COPY manage.py ./
RUN pip install --no-cache-dir . && useradd --create-home ethan && mkdir -p /data \
    && chown ethan /data
USER ethan

EXPOSE 8000
CMD ["python", "manage.py", "ethan_serve", "--bind", "0.0.0.0:8000"]
