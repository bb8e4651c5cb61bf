// Package web holds the diagnostics UI: plain HTML, CSS and ES modules with no
// build step, embedded into the server binary. The server mounts FS at /ui/
// and serves it without authentication; the pages send the bearer token on
// every API call themselves.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html style.css *.js vendor/xterm
var files embed.FS

// FS returns the UI's static files with index.html at the root. Asset URLs in
// the pages are relative, so the tree works under any mount point.
func FS() fs.FS { return files }
