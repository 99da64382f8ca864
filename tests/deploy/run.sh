#!/usr/bin/env bash
# Schema checks of the Kubernetes manifests in deploy/k8s (validate.mjs says what is and is not
# checked). Installs the locked npm packages (kubernetes-models, yaml) when missing or stale.
# QVL_BIN picks the binary whose `serve --help` the container args are checked against.
# Prints "deploy: N passed, N failed" last.
set -u
cd "$(dirname "$0")"
suite_name=deploy
. ../node_suite.bash
require_qvl_bin
npm_sync --engine-strict=false
QVL_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") exec node validate.mjs
