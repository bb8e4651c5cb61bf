// Package api holds the server interface and models generated from
// api/openapi.yaml. Never edit *.gen.go by hand: run `go generate ./...`.
package api

//go:generate go tool oapi-codegen -config server.cfg.yaml ../../../api/openapi.yaml
