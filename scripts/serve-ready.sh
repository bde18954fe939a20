# serve-ready.sh, sourced by the bench scripts: serve_ready DATA LOG
# [flags] starts "$bin" serve on DATA (a free port, its log in LOG) and
# returns once GET /v1/ready answers ready, with pid and addr set; fail
# (the caller's) if serve exits first.
serve_ready() {
  local data=$1 log=$2; shift 2
  "$bin" serve --data "$data" --http 127.0.0.1:0 "$@" >"$log" 2>&1 &
  pid=$! addr=""
  until [ -n "$addr" ]; do
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "serve exited before listening"; }
    addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log" | head -1)
    sleep 0.05
  done
  until curl -fsS "http://$addr/v1/ready" 2>/dev/null | grep -q '"status": *"ready"'; do
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "serve exited before ready"; }
    sleep 0.1
  done
}
