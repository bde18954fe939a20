package settlement

import (
	"runtime"
	"syscall"
	"testing"
)

// TestQuietlyRunsAtNice19WithOneMoreP: f runs on a thread at nice 19 with
// GOMAXPROCS one higher, as it was once f returns.
func TestQuietlyRunsAtNice19WithOneMoreP(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	var prio, during int
	var err error
	Quietly(func() {
		// The raw getpriority answers 20 - nice.
		prio, err = syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
		during = runtime.GOMAXPROCS(0)
	})
	if err != nil || prio != 20-quietNice {
		t.Errorf("f ran at getpriority %d (%v), want %d (nice %d)", prio, err, 20-quietNice, quietNice)
	}
	if during != procs+1 || runtime.GOMAXPROCS(0) != procs {
		t.Errorf("GOMAXPROCS %d while f ran and %d after, want %d then %d", during, runtime.GOMAXPROCS(0), procs+1, procs)
	}
}
