package tools

import "errors"

// Sentinel errors. Errors returned by this package (and by the pipeline for
// tool calls) wrap them with context; test with errors.Is.
var (
	// ErrUnknownTool is returned for a tool name that is not one of
	// Definitions (HTTP 404).
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArguments is returned by ParseArgs for arguments that are
	// not a JSON object (nor a string holding one), or miss or mistype a
	// declared argument, and by the pipeline for an empty /exec command
	// (HTTP 422). A model tool call turns it into an error result the model
	// reads. The message names every problem.
	ErrInvalidArguments = errors.New("invalid tool arguments")
)
