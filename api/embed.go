// Package api embeds the service contract, api/openapi.yaml, so the binary
// serves and validates against exactly the file in the repository.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package api

import _ "embed"

// OpenAPI is the contract as written in api/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
