// Package multicall picks which program a multi-call binary runs: by the name
// it was started as (a "kubectl" symlink) or by its first argument.
package multicall

import (
	"path/filepath"
	"strings"
)

// Resolve returns the program to run and its arguments (argv without the
// program's own name). A binary started as name (or name.exe) is that
// program; otherwise argv[1] names it. An empty name means none was given.
func Resolve(argv []string, programs []string) (string, []string) {
	if len(argv) == 0 {
		return "", nil
	}
	base := strings.TrimSuffix(filepath.Base(argv[0]), ".exe")
	for _, p := range programs {
		if base == p {
			return p, argv[1:]
		}
	}
	if len(argv) < 2 {
		return "", nil
	}
	return argv[1], argv[2:]
}
