# Sourced by the instruction-counting scripts: nginx_conf DIR HTTP_LINES
# writes DIR/nginx.conf, one nginx process in the foreground with one
# worker, no access log, keep-alive without a request limit, its temporary
# files in DIR, and HTTP_LINES inside its http block.
nginx_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
pid $1/nginx.pid; error_log $1/error.log warn;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $1/body;
  proxy_temp_path $1/proxy; fastcgi_temp_path $1/f; uwsgi_temp_path $1/u; scgi_temp_path $1/s;
  $2 }
EOF
}
