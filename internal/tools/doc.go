// Package tools describes the model-facing tools: their definitions (names,
// descriptions, JSON schemas, rendered for OpenAI, Anthropic or neutrally),
// the rules their arguments follow, and the text a model reads as a result.
// Running a tool call is the job of package run.
//
// Floor 4 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package tools
