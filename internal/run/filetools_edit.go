package run

import (
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/tools"
)

func editFile(sc *files.Scope, a tools.Args) (CallResult, any) {
	return CallResult{IsError: true, Text: "edit_file: not yet"}, nil
}

func applyPatch(sc *files.Scope, a tools.Args) (CallResult, any) {
	return CallResult{IsError: true, Text: "apply_patch: not yet"}, nil
}
