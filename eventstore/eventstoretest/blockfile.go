package eventstoretest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// NewestBlock is the path of the highest-numbered block file of a
// JetStream stream, whose directory is streamDir
// (<store>/jetstream/$G/streams/<stream>): the one a crash leaves its tail
// in, which the storage-fault tests damage.
func NewestBlock(tb testing.TB, streamDir string) string {
	tb.Helper()
	dir := filepath.Join(streamDir, "msgs")
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	best, path := -1, ""
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".blk"))
		if err == nil && strings.HasSuffix(e.Name(), ".blk") && n > best {
			best, path = n, filepath.Join(dir, e.Name())
		}
	}
	if path == "" {
		tb.Fatalf("no block file in %s", dir)
	}
	return path
}
