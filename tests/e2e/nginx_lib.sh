#!/usr/bin/env bash
# nginx for the tests that run it and for bench/server_overhead.sh: sourced,
# it sets nothing up.

# nginx_conf PREFIX PORT [CONNECTIONS]: PREFIX/nginx.conf for a master and two
# workers in the foreground, answering 200 on 127.0.0.1:PORT, CONNECTIONS a
# worker (64), everything it writes under PREFIX.
nginx_conf() {
  local prefix="$1" port="$2" connections="${3:-64}"
  mkdir -p "${prefix}/logs" "${prefix}/tmp"
  cat > "${prefix}/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid ${prefix}/nginx.pid;
error_log ${prefix}/logs/error.log;
events { worker_connections ${connections}; }
http {
  access_log off;
  client_body_temp_path ${prefix}/tmp/body;
  proxy_temp_path ${prefix}/tmp/proxy;
  fastcgi_temp_path ${prefix}/tmp/fastcgi;
  uwsgi_temp_path ${prefix}/tmp/uwsgi;
  scgi_temp_path ${prefix}/tmp/scgi;
  server {
    listen 127.0.0.1:${port};
    location / { return 200 "ok\n"; }
  }
}
EOF
}
