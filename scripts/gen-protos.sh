#!/usr/bin/env bash
# Regenerates the gRPC stubs gputui uses to read containerd and the kubelet, from the upstream .proto files
# kept (with their licences) in gputui/core/sources/protos/:
#   containerd/  containerd's api/ folder (containers, namespaces, tasks services and the types they use),
#                from github.com/containerd/containerd at 301026e58c619e63d09c0ec411012e54c0124b03
#   kubelet/     the kubelet's pod-resources API v1, from github.com/kubernetes/kubelet
#                (pkg/apis/podresources/v1/api.proto) at 63b3249724f7d89a8aa48f9acb3811f193c9aa68
# Needs grpcio-tools (pip install grpcio-tools). protoc writes absolute imports from the proto root
# ("from types import mount_pb2"); they are rewritten to the package path, since "types" is also a
# standard-library module.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${GPUTUI_TEST_VENV:-.venv-test}/bin/python"
[ -x "$py" ] || py=python3
root=gputui/core/sources/protos
for part in containerd kubelet; do
  find "$root/$part" -name '*_pb2*.py' -delete
  (cd "$root/$part" && find . -name '*.proto' | sort | sed 's|^\./||' |
     xargs "$OLDPWD/$py" -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=.)
  pkg="gputui.core.sources.protos.$part"
  find "$root/$part" -name "*_pb2*.py" | while read -r f; do
    sed -i -E "s/^from (types|services|podresources)((\.[A-Za-z0-9_]+)*) import/from $pkg.\1\2 import/" "$f"
  done
  find "$root/$part" -type d -exec sh -c 'test -e "$1/__init__.py" || : > "$1/__init__.py"' _ {} \;
done
