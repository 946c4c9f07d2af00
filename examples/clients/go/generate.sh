#!/usr/bin/env bash
# Generate the Go code of apportion.v1 into ./apportionv1 from the repository's proto/ folder.
# Needs protoc, protoc-gen-go and protoc-gen-go-grpc on PATH (go install
# google.golang.org/protobuf/cmd/protoc-gen-go@latest google.golang.org/grpc/cmd/protoc-gen-go-grpc@latest).
# The google.rpc messages come from the module google.golang.org/genproto/googleapis/rpc.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
PROTO_ROOT="${APPORTION_PROTO_ROOT:-../../../proto}"
MODULE="github.com/apportion/apportion/examples/clients/go"
PACKAGE="$MODULE/apportionv1;apportionv1"
files=(apportion/v1/allocation_service.proto apportion/v1/policy.proto apportion/v1/snapshot.proto)
go_opts=(--go_opt="module=$MODULE")
grpc_opts=(--go-grpc_opt="module=$MODULE")
for file in "${files[@]}"; do
  go_opts+=(--go_opt="M$file=$PACKAGE")
  grpc_opts+=(--go-grpc_opt="M$file=$PACKAGE")
done
mkdir -p apportionv1
protoc -I "$PROTO_ROOT" --go_out=. --go-grpc_out=. "${go_opts[@]}" "${grpc_opts[@]}" \
  "${files[@]/#/$PROTO_ROOT/}"
