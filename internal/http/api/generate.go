// Package api holds the server interface and models generated from
// api/openapi.yaml. Never edit *.gen.go by hand: run `go generate ./...`.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package api

//go:generate go tool oapi-codegen -config server.cfg.yaml ../../../api/openapi.yaml
