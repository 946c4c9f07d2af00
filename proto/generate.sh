#!/usr/bin/env bash
# Regenerate the committed protobuf / gRPC Python code and mypy stubs beside the .proto files.
# Run from the repository root:  bash proto/generate.sh
# Needs the dev extras (grpcio-tools, mypy-protobuf): pip install -e '.[dev]'
# tests/test_generated_code.py fails when the committed files differ from this output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
set -x
python -m grpc_tools.protoc -I proto \
  --python_out=proto --grpc_python_out=proto \
  --mypy_out=proto --mypy_grpc_out=proto \
  proto/apportion/v1/*.proto
