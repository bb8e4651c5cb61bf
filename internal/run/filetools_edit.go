package run

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/dshd/dshd/internal/edits"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/tools"
)

// editFile runs edit_file: old_string replaced by new_string (once, or
// every occurrence with replace_all) in the file, written beside it and
// renamed over it. An empty old_string makes a file that does not exist,
// as Claude Code's Edit does.
func editFile(sc *files.Scope, a tools.Args) (CallResult, any) {
	p, old, new, all := a.Str("file_path"), a.Str("old_string"), a.Str("new_string"), a.Bool("replace_all")
	data, _, abs, err := readWhole(sc, p)
	missing := errors.Is(err, files.ErrNotFound)
	switch {
	case missing && old == "":
		if abs, err = sc.Abs(p); err != nil {
			return fileProblem(err), nil
		}
	case err != nil:
		return fileProblem(err), nil
	}
	out, n, err := edits.Replace(string(data), old, new, all)
	if err != nil {
		return CallResult{IsError: true, Text: editProblem(abs, err)}, nil
	}
	w, err := sc.Put(p, strings.NewReader(out), 0, missing)
	if err != nil {
		return fileProblem(err), nil
	}
	text := fmt.Sprintf("Edited %s: %d replacement(s)", w.Path, n)
	if missing {
		text = fmt.Sprintf("Created %s (%d bytes)", w.Path, w.Size)
	}
	return CallResult{Text: text}, map[string]any{"filePath": w.Path, "oldString": old, "newString": new, "replaceAll": all}
}

// editProblem says what is wrong with an edit of abs, and what to do.
func editProblem(abs string, err error) string {
	switch {
	case errors.Is(err, edits.ErrNotFound):
		return "old_string was not found in " + abs + ": it must match the file exactly, whitespace and indentation included (read_file shows the file; leave its line numbers out)"
	case errors.Is(err, edits.ErrNotUnique):
		return "edit " + abs + ": " + err.Error()
	case errors.Is(err, edits.ErrNoChange):
		return "old_string and new_string are the same: nothing to change in " + abs
	}
	return "edit " + abs + ": " + err.Error()
}

// applyPatch runs apply_patch: the patch is parsed and planned against the
// files as they are (every hunk must match), every path it writes or
// removes is checked against the sandbox, and only then are the files
// written (each beside itself and renamed over it) and removed. The
// result lists them as Codex does: A added, M modified (or moved there),
// D deleted.
func applyPatch(sc *files.Scope, a tools.Args) (CallResult, any) {
	ops, err := edits.Parse(a.Str("input"))
	if err != nil {
		return CallResult{IsError: true, Text: "apply_patch: " + err.Error()}, nil
	}
	shown, err := absOps(sc, ops)
	if err != nil {
		return CallResult{IsError: true, Text: "apply_patch: nothing was changed: " + fileProblem(err).Text}, nil
	}
	existed := map[string]fs.FileMode{}
	changes, err := edits.Plan(ops, func(p string) ([]byte, error) {
		data, mode, _, err := readWhole(sc, p)
		if errors.Is(err, files.ErrNotFound) {
			return nil, fmt.Errorf("%w: %w", fs.ErrNotExist, err)
		}
		if err == nil {
			existed[p] = mode
		}
		return data, err
	})
	if err != nil {
		return CallResult{IsError: true, Text: "apply_patch: nothing was changed: " + err.Error()}, nil
	}
	for _, c := range changes {
		for _, p := range []string{c.Path, c.From} {
			if p == "" {
				continue
			}
			if err := sc.CheckWritable(p); err != nil {
				return CallResult{IsError: true, Text: "apply_patch: nothing was changed: " + fileProblem(err).Text}, nil
			}
		}
	}
	var b strings.Builder
	b.WriteString("Success. Updated the following files:")
	for i, c := range changes {
		mark, err := applyChange(sc, c, existed)
		if err != nil {
			text := fileProblem(err).Text
			if i > 0 {
				text += "\n" + b.String() // what was applied before it
			}
			return CallResult{IsError: true, Text: "apply_patch: " + text}, nil
		}
		fmt.Fprintf(&b, "\n%s %s", mark, shown[c.Path])
	}
	return CallResult{Text: b.String()}, b.String()
}

// absOps makes each op's paths absolute and clean (a relative one below
// the agent's cwd), so that a file the patch names two ways ("a", "./a",
// "/cwd/a") is one file to the plan, each op seeing what those before it
// made. shown maps each absolute path to the first name the patch gave
// it, for the result. An empty path is left for the plan to refuse.
func absOps(sc *files.Scope, ops []edits.Op) (shown map[string]string, err error) {
	shown = map[string]string{}
	abs := func(p *string) error {
		if *p == "" {
			return nil
		}
		a, err := sc.Abs(*p)
		if err != nil {
			return err
		}
		if _, ok := shown[a]; !ok {
			shown[a] = *p
		}
		*p = a
		return nil
	}
	for i := range ops {
		if err := abs(&ops[i].Path); err != nil {
			return nil, err
		}
		if err := abs(&ops[i].MoveTo); err != nil {
			return nil, err
		}
	}
	return shown, nil
}

// applyChange writes or removes one planned change and returns its mark.
// A moved file keeps its mode; a rewritten one keeps its own.
func applyChange(sc *files.Scope, c edits.Change, existed map[string]fs.FileMode) (string, error) {
	if c.Delete {
		_, err := sc.Remove(c.Path, false)
		return "D", err
	}
	mark, mode := "A", fs.FileMode(0)
	if _, ok := existed[c.Path]; ok {
		mark = "M"
	}
	if m, ok := existed[c.From]; ok && c.From != "" {
		mark, mode = "M", m
	}
	if _, err := sc.Put(c.Path, bytes.NewReader(c.Content), mode, true); err != nil {
		return "", err
	}
	if c.From != "" {
		if _, err := sc.Remove(c.From, false); err != nil {
			return "", err
		}
	}
	return mark, nil
}
