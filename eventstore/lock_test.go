package eventstore_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fdj/tresor/eventstore"
	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// TestSecondServerOnADataDirectoryRefused starts two embedded servers on
// one directory in one process: the second is refused with the first's
// description, and gets the directory once the first has stopped.
func TestSecondServerOnADataDirectoryRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir, Holder: "tresor serve"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir})
	var le *eventstore.LockedError
	if !errors.As(err, &le) || !errors.Is(err, eventstore.ErrLocked) {
		t.Fatalf("second server: %v, want a *LockedError", err)
	}
	if le.Dir != dir || le.Holder.PID != os.Getpid() || le.Holder.Command != "tresor serve" ||
		!strings.Contains(err.Error(), fmt.Sprintf("%s is in use by pid %d (tresor serve, since ", dir, os.Getpid())) {
		t.Fatalf("refusal %q names %+v", err, le)
	}
	first.Shutdown()
	second, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	second.Shutdown()
}

// holdEnv makes the test binary a process that holds a data directory
// (TestHelperHoldsADataDirectory) until it is killed.
const holdEnv = "TRESOR_TEST_HOLD_DATA_DIR"

// TestHelperHoldsADataDirectory is not a test: run with holdEnv set, it
// runs an embedded server with readers on that directory and waits to be
// killed.
func TestHelperHoldsADataDirectory(t *testing.T) {
	dir := os.Getenv(holdEnv)
	if dir == "" {
		t.Skip("a helper process of TestKilledHolderLeavesNoStaleLock")
	}
	if _, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir, Holder: "helper", Readers: &eventstore.ReaderAccess{}}); err != nil {
		t.Fatal(err)
	}
	select {}
}

// TestKilledHolderLeavesNoStaleLock kills a process holding a data
// directory with SIGKILL: the directory is free at once (the kernel
// released the lock), and the advertisement the holder left is not
// trusted: a reader runs its own server.
func TestKilledHolderLeavesNoStaleLock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	holder := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsADataDirectory$")
	holder.Env = append(os.Environ(), holdEnv+"="+dir)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill() })
	eventstoretest.Eventually(t, 30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(dir, "tresor-reader.json")); err != nil {
			return err
		}
		_, err := eventstore.RunEmbedded(eventstore.EmbeddedConfig{DataDir: dir})
		var le *eventstore.LockedError
		if !errors.As(err, &le) || le.Holder.PID != holder.Process.Pid || le.Holder.Command != "helper" {
			return fmt.Errorf("while the helper holds the directory: %v", err)
		}
		return nil
	})
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	holder.Wait()
	if _, err := os.Stat(filepath.Join(dir, "tresor-reader.json")); err != nil {
		t.Fatalf("the killed holder's advertisement: %v, want it left behind", err)
	}
	srv, nc, err := eventstore.RunOrJoin(eventstoretest.Ctx(t, 30*time.Second), eventstore.EmbeddedConfig{DataDir: dir})
	if err != nil || srv == nil {
		t.Fatalf("after SIGKILL: server %v, %v; want a server of our own at once", srv, err)
	}
	nc.Close()
	srv.Shutdown()
}
