# Breaks every rule of devtools/lint/dockerfile-checklist.sh once: tests/lint/linters.sh
FROM debian:latest
RUN apt-get update && apt-get install -y curl
RUN case "${TARGETARCH}" in amd64) echo ok ;; esac
ADD app /app
ENTRYPOINT /app
