package tools

import "fmt"

// The file tools' bounds.
const (
	// DefaultReadLines is how many lines read_file returns without limit
	// (Claude Code's Read reads 2,000).
	DefaultReadLines = 2000
	// MaxReadFileBytes bounds the text one read_file call returns; the
	// result says where to read on.
	MaxReadFileBytes = 256 << 10
	// MaxLineRunes cuts longer lines in a read_file result.
	MaxLineRunes = 2000
	// MaxEditBytes bounds a file edit_file or apply_patch reads and writes
	// whole.
	MaxEditBytes = 16 << 20
)

var readFileDescription = fmt.Sprintf(`Read a text file. file_path is absolute or relative to your working directory.

Lines come numbered from 1, as cat -n prints them: the number, a tab, the line. By default up to %d lines from the start; for long files give offset (the first line to read, from 1) and limit (how many lines). Lines longer than %d characters are cut. The result ends with a line saying where to read on when there is more. Binary files and directories are refused: use bash for those.`, DefaultReadLines, MaxLineRunes)

const writeFileDescription = `Write a file: content replaces what the file holds, or makes a new file (and the directories on its way). file_path is absolute or relative to your working directory. Prefer edit_file for changes to an existing file: it sends only what changes.

The file is written whole or not at all, only where your sandbox lets you write.`

const editFileDescription = `Replace text in a file: old_string, exactly as the file has it (indentation and line endings included, without read_file's line numbers), becomes new_string.

old_string must be found, and found once, unless replace_all is true (every occurrence is replaced): if it is not unique, include more of the surrounding lines. new_string must differ from old_string. file_path is absolute or relative to your working directory.`

const applyPatchDescription = `Edit files with a patch: add, delete, update and move files in one call. input is the whole patch:

*** Begin Patch
*** Add File: path/new.txt
+every line of the new file, each after a +
*** Update File: path/old.py
*** Move to: path/renamed.py
@@ def greet():
 context line (a space first)
-line removed
+line added
*** Delete File: path/obsolete.txt
*** End Patch

Each hunk starts with @@ (optionally followed by a line, such as a function, that locates it) and shows about 3 lines of context before and after each change. Paths are relative to your working directory. The patch applies whole or not at all if a hunk does not match.`
