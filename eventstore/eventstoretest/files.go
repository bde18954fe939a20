package eventstoretest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FileHolding names a file under dir whose bytes hold s, or "": the search
// of a data directory, a backup or a snapshot for what must not be there
// (an erased person's data, a key destroyed).
func FileHolding(tb testing.TB, dir string, s []byte) string {
	tb.Helper()
	found := ""
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != "" {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, s) {
			found = path
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return found
}
