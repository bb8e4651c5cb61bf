package run

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/edits"
	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/hooks"
	"github.com/dshd/dshd/internal/sandbox"
	"github.com/dshd/dshd/internal/tools"
)

// The file tools (read_file, write_file, edit_file, apply_patch) read and
// write through the agent's files.Scope, as the harness's file routes do:
// inside its view, under its sandbox policy, by descriptor. Hooks see them
// as the vendors' own tools: Claude Code's Read, Write and Edit, and
// Codex's apply_patch (which Codex's matchers also select as Write and
// Edit).

// fileHookNames are the tool names hooks see for the file tools.
var fileHookNames = map[string]string{
	tools.ToolReadFile:   "Read",
	tools.ToolWriteFile:  "Write",
	tools.ToolEditFile:   "Edit",
	tools.ToolApplyPatch: "apply_patch",
}

// applyPatchAliases are the matcher aliases of apply_patch, as in Codex.
var applyPatchAliases = []string{"Write", "Edit"}

// fileHookInput is the tool input hooks see for a file tool call, in the
// vendor's shape. file_path is absolute (relative ones are resolved
// against cwd), as Claude Code's tools always give it.
func fileHookInput(name, cwd string, a tools.Args) map[string]any {
	fp := a.Str("file_path")
	if !filepath.IsAbs(fp) && cwd != "" {
		fp = filepath.Join(cwd, fp)
	}
	switch name {
	case tools.ToolReadFile:
		in := map[string]any{"file_path": fp}
		for _, k := range []string{"offset", "limit"} {
			if a.Has(k) {
				in[k] = a.Int(k)
			}
		}
		return in
	case tools.ToolWriteFile:
		return map[string]any{"file_path": fp, "content": a.Str("content")}
	case tools.ToolEditFile:
		return map[string]any{"file_path": fp, "old_string": a.Str("old_string"),
			"new_string": a.Str("new_string"), "replace_all": a.Bool("replace_all")}
	}
	return map[string]any{"command": a.Str("input")} // Codex's apply_patch hooks read the patch there
}

// fileTool runs a file tool: PreToolUse hooks, the read or the change,
// PostToolUse hooks when it succeeded. A refused path, a missing file or
// a string not found are error results the model reads.
func (s *Service) fileTool(ctx context.Context, agent agents.Agent, callID, name string, a tools.Args, o CallOptions) (CallResult, error) {
	var aliases []string
	if name == tools.ToolApplyPatch {
		aliases = applyPatchAliases
	}
	hc := s.hookCall(agent, callID, fileHookNames[name], fileHookInput(name, agent.Cwd, a), aliases...)
	pre, err := hc.run(ctx, hooks.PreToolUse, nil)
	if err != nil {
		return CallResult{}, err
	}
	if pre.Blocked {
		res := CallResult{IsError: true, Text: blockedText("PreToolUse", pre.Reason)}
		addHookOutput(&res, pre)
		return res, nil
	}
	// A change once begun is finished and recorded, whoever goes away.
	ctx = context.WithoutCancel(ctx)
	sc, release, err := s.FileScope(ctx, agent.ID)
	if err != nil {
		return CallResult{}, err
	}
	tighten(sc, s.AgentPolicy(agent), o.Sandbox)
	var (
		res      CallResult
		response any
	)
	switch name {
	case tools.ToolReadFile:
		res, response = readFile(sc, a)
	case tools.ToolWriteFile:
		res, response = writeFile(sc, a)
	case tools.ToolEditFile:
		res, response = editFile(sc, a)
	default:
		res, response = applyPatch(sc, a)
	}
	release()
	addHookOutput(&res, pre)
	if !res.IsError {
		hc.after(ctx, &res, response)
	}
	return res, nil
}

// tighten makes sc's file system rule the call's when the caller asked
// for a tighter one than the agent's (an MCP client's declared sandbox);
// never a looser one.
func tighten(sc *files.Scope, agent, call sandbox.Policy) {
	if call.FS == "" || call.FS == agent.FS {
		return
	}
	if (sandbox.Policy{FS: call.FS, Network: agent.Network, Allow: agent.Allow}).Within(agent) {
		sc.FS = call.FS
	}
}

// fileProblem is the error result for err met on a file tool's path.
func fileProblem(err error) CallResult {
	text := err.Error()
	switch {
	case errors.Is(err, files.ErrHidden):
		text += " (dshd's home, its token and the hidden paths are out of reach)"
	case errors.Is(err, files.ErrNotWritable):
		text += " (your sandbox decides where you may write)"
	case errors.Is(err, files.ErrProtected):
		text += " (.git directories and protected paths are read-only in your sandbox)"
	case errors.Is(err, files.ErrThroughLink):
		text += " (a symbolic link on the way: name the path it leads to)"
	}
	return CallResult{IsError: true, Text: text}
}

// readFile runs read_file: cat -n style lines from offset (1 on), at most
// limit of them and tools.MaxReadFileBytes of text, each cut at
// tools.MaxLineRunes runes, and a last line saying where to read on.
func readFile(sc *files.Scope, a tools.Args) (CallResult, any) {
	t, err := sc.Open(a.Str("file_path"))
	if err != nil {
		return fileProblem(err), nil
	}
	defer t.Close()
	if t.IsDir() {
		return CallResult{IsError: true, Text: t.Path + " is a directory: list it with bash (ls)"}, nil
	}
	br := bufio.NewReaderSize(t.File, 64<<10)
	head, _ := br.Peek(8 << 10)
	if edits.IsBinary(head) {
		return CallResult{IsError: true, Text: fmt.Sprintf("%s is a binary file (%d bytes): read_file reads text; look at it with bash (file, xxd)", t.Path, t.Info.Size())}, nil
	}
	if len(head) == 0 {
		return CallResult{Text: "(empty file: " + t.Path + ")"}, map[string]any{"type": "text", "file": map[string]any{"filePath": t.Path, "content": "", "numLines": 0, "startLine": 1, "totalLines": 0}}
	}
	offset, limit := max(a.Int("offset"), 1), int64(tools.DefaultReadLines)
	if a.Has("limit") {
		limit = a.Int("limit")
	}
	text, shown, more, seen, err := numberLines(br, offset, limit)
	if err != nil {
		return fileProblem(fmt.Errorf("read %s: %w", t.Path, err)), nil
	}
	if shown == 0 {
		return CallResult{IsError: true, Text: fmt.Sprintf("offset %d is past the end of %s, which has %d lines", offset, t.Path, seen)}, nil
	}
	content := text
	if more {
		text += fmt.Sprintf("\n[lines %d-%d shown; the file goes on: read_file {\"file_path\":%q,\"offset\":%d}]", offset, offset+shown-1, t.Path, offset+shown)
	}
	return CallResult{Text: text}, map[string]any{"type": "text", "file": map[string]any{"filePath": t.Path, "content": content, "numLines": shown, "startLine": offset}}
}

// numberLines reads r's lines from line offset (1 on), at most limit of
// them and about tools.MaxReadFileBytes of text, as cat -n numbers them
// (the number right-aligned in six columns, a tab, the line). shown is how
// many it returned, more whether lines follow them, seen how many lines it
// read (all the file's when more is false).
func numberLines(r *bufio.Reader, offset, limit int64) (text string, shown int64, more bool, seen int64, err error) {
	var b strings.Builder
	keep := tools.MaxLineRunes*utf8.UTFMax + 1
	for n := int64(1); ; n++ {
		line, rerr := readLine(r, keep)
		if rerr != nil && rerr != io.EOF {
			return "", 0, false, n - 1, rerr
		}
		if len(line) == 0 && rerr == io.EOF {
			return strings.TrimSuffix(b.String(), "\n"), shown, false, n - 1, nil
		}
		if n >= offset {
			if shown == limit || int64(b.Len()) >= tools.MaxReadFileBytes {
				return strings.TrimSuffix(b.String(), "\n"), shown, true, n, nil
			}
			writeNumbered(&b, n, line)
			shown++
		}
		if rerr == io.EOF {
			return strings.TrimSuffix(b.String(), "\n"), shown, false, n, nil
		}
	}
}

// readLine reads one line from r, its line ending included, keeping at
// most keep bytes of it (the rest is read and dropped).
func readLine(r *bufio.Reader, keep int) ([]byte, error) {
	var out []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(out) < keep {
			out = append(out, chunk[:min(len(chunk), keep-len(out))]...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return out, err
		}
	}
}

// writeNumbered writes line n as cat -n does: the number right-aligned in
// six columns, a tab, the line without its line ending (LF or CRLF), as
// valid UTF-8 and cut at tools.MaxLineRunes runes; then a newline.
func writeNumbered(b *strings.Builder, n int64, line []byte) {
	var num [20]byte
	d := strconv.AppendInt(num[:0], n, 10)
	for pad := 6 - len(d); pad > 0; pad-- {
		b.WriteByte(' ')
	}
	b.Write(d)
	b.WriteByte('\t')
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if len(line) <= tools.MaxLineRunes && utf8.Valid(line) {
		b.Write(line) // the common case: no rune to count, nothing to mend
	} else {
		s := strings.ToValidUTF8(string(line), "\uFFFD")
		if utf8.RuneCountInString(s) > tools.MaxLineRunes {
			s = string([]rune(s)[:tools.MaxLineRunes]) + " …[line cut]"
		}
		b.WriteString(s)
	}
	b.WriteByte('\n')
}

// writeFile runs write_file: content replaces the file (or makes it, with
// the directories on its way), written beside it and renamed over it.
func writeFile(sc *files.Scope, a tools.Args) (CallResult, any) {
	p, content := a.Str("file_path"), a.Str("content")
	kind := "create"
	if t, err := sc.Open(p); err == nil {
		kind = "update"
		t.Close()
	}
	w, err := sc.Put(p, strings.NewReader(content), 0, true)
	if err != nil {
		return fileProblem(err), nil
	}
	verb := "Created"
	if kind == "update" {
		verb = "Wrote"
	}
	return CallResult{Text: fmt.Sprintf("%s %s (%d bytes)", verb, w.Path, w.Size)},
		map[string]any{"type": kind, "filePath": w.Path, "content": content}
}

// readWhole reads the text file p for a change: at most
// tools.MaxEditBytes, and not a binary.
func readWhole(sc *files.Scope, p string) (data []byte, mode fs.FileMode, abs string, err error) {
	t, err := sc.Open(p)
	if err != nil {
		return nil, 0, "", err
	}
	defer t.Close()
	if t.IsDir() {
		return nil, 0, t.Path, fmt.Errorf("read %s: %w", t.Path, files.ErrIsDir)
	}
	if t.Info.Size() > tools.MaxEditBytes {
		return nil, 0, t.Path, fmt.Errorf("%s is %d bytes, more than the %d this tool edits: change it with bash", t.Path, t.Info.Size(), tools.MaxEditBytes)
	}
	data, err = io.ReadAll(io.LimitReader(t.File, tools.MaxEditBytes+1))
	if err != nil {
		return nil, 0, t.Path, fmt.Errorf("read %s: %w", t.Path, err)
	}
	if len(data) > tools.MaxEditBytes {
		return nil, 0, t.Path, fmt.Errorf("%s grew past %d bytes while read: change it with bash", t.Path, tools.MaxEditBytes)
	}
	if edits.IsBinary(data) {
		return nil, 0, t.Path, fmt.Errorf("%s is a binary file: this tool edits text; use bash", t.Path)
	}
	return data, t.Info.Mode().Perm(), t.Path, nil
}
