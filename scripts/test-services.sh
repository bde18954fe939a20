#!/usr/bin/env bash
# Starts, or installs and starts, what Tresor's tests need besides Go:
# PostgreSQL on 127.0.0.1:5432 (trust auth), RabbitMQ on 127.0.0.1:5672
# (guest/guest), Debian's chromium for the browser tests and Debian's
# prometheus (promtool) for the alert rules' tests. NATS needs
# nothing: the tests start their own nats-server in-process. Both
# `make test` and .ci/run call it, so that the README's test command passes
# on a fresh machine by itself. Anything it cannot provide stops it with a
# message that names it.
set -euo pipefail

fail() {
  echo "test-services: FAILED: $*" >&2
  echo "test-services: the tests that need it would fail; fix this first." >&2
  exit 1
}
say() { echo "test-services: $*"; }

# apt_install installs Debian packages, updating the package lists once.
apt_updated=
apt_install() {
  [ "$(id -u)" = 0 ] || fail "$* missing, and installing it needs root (apt-get install $*)"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$apt_updated" ]; then
    apt-get update -qq || fail "apt-get update (Debian's package archive must be reachable to install $*)"
    apt_updated=1
  fi
  apt-get install -y -qq "$@" >/dev/null || fail "apt-get install $*"
}

# PostgreSQL: the machine's cluster; the tests create and drop their own
# databases.
command -v pg_isready >/dev/null || { say "PostgreSQL is missing; installing Debian's postgresql"; apt_install postgresql; }
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  say "PostgreSQL is down; starting it"
  for v in /etc/postgresql/*; do
    [ -d "$v/main" ] && { pg_ctlcluster --skip-systemctl-redirect "$(basename "$v")" main start || true; }
  done
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432 -q || fail "PostgreSQL is not reachable on 127.0.0.1:5432"

# RabbitMQ: the broker the finance feed's tests publish to; they declare
# and delete their own exchanges and queues.
amqp_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
if ! amqp_up; then
  command -v rabbitmq-server >/dev/null || { say "RabbitMQ is missing; installing Debian's rabbitmq-server"; apt_install rabbitmq-server; }
  say "RabbitMQ is down; starting it"
  rabbitmq-server -detached || true
  for _ in $(seq 1 60); do amqp_up && break; sleep 1; done
fi
amqp_up || fail "RabbitMQ is not reachable on 127.0.0.1:5672"
if command -v rabbitmq-diagnostics >/dev/null; then
  for _ in $(seq 1 30); do rabbitmq-diagnostics -q check_running >/dev/null 2>&1 && break; sleep 1; done
  rabbitmq-diagnostics -q check_running >/dev/null 2>&1 || fail "RabbitMQ listens on 5672 but does not report running"
fi

# Chromium: the browser tests drive Debian's chromium package headless.
command -v chromium >/dev/null || { say "chromium is missing; installing Debian's chromium"; apt_install chromium; }
chromium --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1 || chromium --version >/dev/null || fail "chromium does not start"

# Prometheus: the alert rules are checked by promtool and evaluated by a
# real Prometheus scraping serve.
command -v promtool >/dev/null && command -v prometheus >/dev/null || { say "prometheus is missing; installing Debian's prometheus"; apt_install prometheus; }

# The disk-full test mounts a small ext4 image on a loop device.
command -v mkfs.ext4 >/dev/null || { say "mkfs.ext4 is missing; installing Debian's e2fsprogs"; apt_install e2fsprogs; }

say "PostgreSQL, RabbitMQ, chromium and prometheus are ready"
