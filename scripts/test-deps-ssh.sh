#!/usr/bin/env bash
# Installs what the remote-kernel tests need when it is missing: an sshd
# to start on 127.0.0.1 and the ssh client (Debian/Ubuntu packages).
set -euo pipefail
if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "test-deps-ssh: openssh-server/openssh-client missing and not root; remote tests will be skipped" >&2
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null
