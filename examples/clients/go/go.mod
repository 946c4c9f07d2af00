module github.com/apportion/apportion/examples/clients/go

go 1.21

// Requirements are resolved by `go mod tidy` (grpc, protobuf, genproto/googleapis/rpc).
