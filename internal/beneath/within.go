package beneath

import (
	"path/filepath"
	"strings"
)

// Within reports whether p is dir or below it, by their names alone:
// neither is looked up and no link is followed (p is "/a/b/../c" is below
// "/a"; "/ab" is not). It is for decisions about names (a sandbox plan's
// mounts, whether a directory is among a workspace's); whatever then
// touches a file goes through a descriptor (Openat2). A relative p or dir
// beside an absolute other is not within.
func Within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
