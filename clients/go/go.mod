module github.com/opledger/opledger/clients/go

go 1.23.0

require (
	github.com/opledger/opledger/gen/go v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.33.0 // indirect
	golang.org/x/text v0.26.0 // indirect
)

// In this repository the client builds against the generated code next to it.
// A program outside the repository needs the same replacement in its own
// go.mod (see docs/clients/go.md): replace directives of a dependency are
// ignored.
replace github.com/opledger/opledger/gen/go => ../../gen/go
