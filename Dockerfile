# One image for every eru service; the command picks the service.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN pip install . \
 && useradd --system --create-home --uid 10001 eru
USER eru
ENV ERU_LOG_FORMAT=json ERU_STATE_DIR=/home/eru/state
CMD ["eru", "--help"]
